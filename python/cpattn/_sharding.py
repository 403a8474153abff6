"""cpattn.shard / cpattn.unshard: a whole tensor to this rank's piece of a CP layout and back."""

import torch
import torch.distributed as dist

from . import _cpattn
from ._errors import error
from ._groups import resolve_group


def token_indices(layout, seq_len, group):
    """Global token indices this rank of `group` holds in `layout`, in local order."""
    return _cpattn.shard_token_indices(layout, int(seq_len), group.size(), group.rank())


def whole_length(local_len, group, doc_ids, seq_len, timeout):
    """The whole sequence's length S of a call whose rank holds local_len tokens: len(doc_ids),
    seq_len, or the sum of every rank's local length (cpattn's all-reduce over the group, under
    the call's deadline of `timeout` seconds: a rank that never joins raises cpattn.Error)."""
    if doc_ids is not None:
        return int(doc_ids.numel())
    if seq_len is not None:
        return int(seq_len)
    total = torch.tensor([float(local_len)], dtype=torch.float64)  # exact below 2^53
    _cpattn.allreduce_sum(group, total, float(timeout))
    return int(total)


def shard(x, dim=1, *, group=None, layout="zigzag"):
    """This rank's piece of the whole tensor x along `dim` (the sequence dimension), in `layout`
    order: the tokens shard_token_indices gives, as a new tensor (index_select). group: a
    ProcessGroup, a DeviceMesh or None (the world group), as ring_attention takes."""
    group, _ = resolve_group(group)
    idx = token_indices(layout, x.shape[dim], group).to(x.device)
    return x.index_select(dim, idx)


def unshard(x_local, dim=1, *, group=None, layout="zigzag"):
    """The whole tensor from every rank's piece (the inverse of shard): all-gathers the pieces
    over `group` (padded to the longest, since pieces of an uneven split differ in length) and
    puts each token back at its global index. Not differentiable."""
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
        idx = _cpattn.shard_token_indices(layout, total, p, r)
        if idx.numel() != lengths[r]:
            raise error("shape_mismatch", f"unshard: rank {r} holds {lengths[r]} tokens, the "
                        f"{layout} split of {total} gives it {idx.numel()}")
        whole.index_copy_(dim, idx, pieces[r].narrow(dim, 0, lengths[r]))
    return whole
