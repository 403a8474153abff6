"""cpattn.shard / cpattn.unshard: a whole tensor to this rank's piece of a CP layout and back."""

import torch
import torch.distributed as dist

from . import _cpattn
from ._errors import error
from ._groups import resolve_group


def token_indices(layout, seq_len, group, doc_ids=None, cu_seqlens=None):
    """Global token indices this rank of `group` holds in `layout`, in local order, for a
    sequence of seq_len tokens whose documents are doc_ids or cu_seqlens (None: one document;
    they matter to "doc_zigzag" only)."""
    return _cpattn.shard_token_indices(layout, int(seq_len), group.size(), group.rank(),
                                       doc_ids=doc_ids, cu_seqlens=cu_seqlens)


def count_tokens(q_tokens, k_tokens, group, timeout):
    """The whole sequence's (q, k) token counts of a call whose rank holds q_tokens queries and
    k_tokens keys: the sums over the group (cpattn's all-reduce, under the call's deadline of
    `timeout` seconds: a rank that never joins raises cpattn.Error). Every call over a group
    makes this one exchange first."""
    total = torch.tensor([float(q_tokens), float(k_tokens)], dtype=torch.float64)  # exact < 2^53
    _cpattn.allreduce_sum(group, total, float(timeout))
    return int(total[0]), int(total[1])


def shard(x, dim=1, *, group=None, layout="zigzag", doc_ids=None, cu_seqlens=None):
    """This rank's piece of the whole tensor x along `dim` (the sequence dimension), in `layout`
    order: the tokens shard_token_indices gives, as a new tensor (index_select). group: a
    ProcessGroup, a DeviceMesh or None (the world group), as ring_attention takes. For
    layout="doc_zigzag" (every document balanced over the ranks) pass the whole sequence's
    documents, as doc_ids (int64 [S]) or as flash-attn's cu_seqlens (int32 or int64 [D + 1],
    e.g. of a thd tensor with dim=0); without them the sequence is one document."""
    group, _ = resolve_group(group)
    idx = token_indices(layout, x.shape[dim], group, doc_ids, cu_seqlens).to(x.device)
    return x.index_select(dim, idx)


def unshard(x_local, dim=1, *, group=None, layout="zigzag", doc_ids=None, cu_seqlens=None):
    """The whole tensor from every rank's piece (the inverse of shard, with the same layout and
    documents): all-gathers the pieces over `group` (padded to the longest, since pieces of an
    uneven split differ in length) and puts each token back at its global index. Not
    differentiable."""
    group, _ = resolve_group(group)
    p = group.size()
    lengths = [torch.zeros(1, dtype=torch.int64) for _ in range(p)]
    dist.all_gather(lengths, torch.tensor([x_local.shape[dim]], dtype=torch.int64), group=group)
    lengths = [int(n) for n in lengths]
    longest = max(lengths)
    pad_shape = list(x_local.shape)
    pad_shape[dim] = longest - x_local.shape[dim]
    padded = torch.cat([x_local, x_local.new_zeros(pad_shape)], dim=dim).contiguous()
    pieces = [torch.empty_like(padded) for _ in range(p)]
    dist.all_gather(pieces, padded, group=group)
    total = sum(lengths)
    whole_shape = list(x_local.shape)
    whole_shape[dim] = total
    whole = x_local.new_empty(whole_shape)
    for r in range(p):
        idx = _cpattn.shard_token_indices(layout, total, p, r, doc_ids=doc_ids,
                                          cu_seqlens=cu_seqlens)
        if idx.numel() != lengths[r]:
            raise error("shape_mismatch", f"unshard: rank {r} holds {lengths[r]} tokens, the "
                        f"{layout} split of {total} gives it {idx.numel()}")
        whole.index_copy_(dim, idx, pieces[r].narrow(dim, 0, lengths[r]))
    return whole
