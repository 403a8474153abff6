"""cpattn.shard / cpattn.unshard: a whole tensor to this rank's piece of a CP layout and back."""

import zlib

import torch

from . import _cpattn
from ._agreement import agree, site_text
from ._errors import error, over_the_group
from ._groups import resolve_group
from ._ops import DEFAULT_TIMEOUT_S, check_doc_ids_type, cu_seqlens_int64, refuse_grouped_call


def _documents(doc_ids, cu_seqlens):
    """(doc_ids, cu_seqlens) checked as attention checks them (doc_ids int64; cu_seqlens int32
    or int64, returned as int64): cpattn.Error invalid_argument otherwise, or when both are
    given."""
    if doc_ids is not None and cu_seqlens is not None:
        raise error("invalid_argument", "pass doc_ids or cu_seqlens (the documents), not both")
    check_doc_ids_type(doc_ids)
    return doc_ids, None if cu_seqlens is None else cu_seqlens_int64(cu_seqlens, "cu_seqlens")


def token_indices(layout, seq_len, group, doc_ids=None, cu_seqlens=None):
    """Global token indices this rank of `group` holds in `layout`, in local order, for a
    sequence of seq_len tokens whose documents are doc_ids or cu_seqlens (None: one document;
    they matter to "doc_zigzag" only)."""
    doc_ids, cu_seqlens = _documents(doc_ids, cu_seqlens)
    return _cpattn.shard_token_indices(layout, int(seq_len), group.size(), group.rank(),
                                       doc_ids=doc_ids, cu_seqlens=cu_seqlens)


def shard(x, dim=1, *, group=None, layout="zigzag", doc_ids=None, cu_seqlens=None):
    """This rank's piece of the whole tensor x along `dim` (the sequence dimension), in `layout`
    order: the tokens shard_token_indices gives, as a new tensor (index_select). group: a
    ProcessGroup, a DeviceMesh or None (the world group), as ring_attention takes. For
    layout="doc_zigzag" (every document balanced over the ranks) pass the whole sequence's
    documents, as doc_ids (int64 [S]) or as flash-attn's cu_seqlens (int32 or int64 [D + 1],
    e.g. of a thd tensor with dim=0); without them the sequence is one document. Documents that
    attention would refuse (another dtype, both forms, cu_seqlens that do not start at 0 or end
    at S, or that decrease) raise cpattn.Error naming them."""
    group, _ = resolve_group(group)
    idx = token_indices(layout, x.shape[dim], group, doc_ids, cu_seqlens).to(x.device)
    return x.index_select(dim, idx)


def unshard(x_local, dim=1, *, group=None, layout="zigzag", doc_ids=None, cu_seqlens=None,
            timeout=DEFAULT_TIMEOUT_S):
    """The whole tensor from every rank's piece (the inverse of shard, with the same layout and
    documents): gathers the pieces over `group` (padded to the longest, since pieces of an
    uneven split differ in length) and puts each token back at its global index. Not
    differentiable. First the ranks agree (cpattn.Error rank_disagreement on every rank
    otherwise, naming each rank's view): the same layout, dim, dtype, sizes outside `dim` and
    documents. Every wait has the deadline `timeout` (seconds). A rank whose arguments are
    refused (x_local not a tensor, dim not one of its dimensions) joins the agreement as
    refusing, so the others raise at once too."""
    group, _ = resolve_group(group)
    return _unshard(x_local, dim, group, layout, doc_ids, cu_seqlens, timeout)


@over_the_group
def _unshard(x_local, dim, group, layout, doc_ids, cu_seqlens, timeout):
    """unshard over `group` (resolved): every exchange and error of it is the group's."""
    site = "unshard"
    try:
        if not isinstance(x_local, torch.Tensor):
            raise error("invalid_argument", f"unshard: x_local must be a tensor, got "
                        f"{type(x_local).__name__}")
        if isinstance(dim, bool) or not isinstance(dim, int) or \
                not -x_local.dim() <= dim < x_local.dim():
            raise error("invalid_argument", f"unshard: dim {dim!r} is not a dimension of "
                        f"x_local (shape {tuple(x_local.shape)})")
        dim %= x_local.dim()
        doc_ids, cu_seqlens = _documents(doc_ids, cu_seqlens)  # refused on every rank at once
        sizes = ",".join("*" if d == dim else str(n) for d, n in enumerate(x_local.shape))
        docs = doc_ids if doc_ids is not None else cu_seqlens
        docs_crc = "" if docs is None else \
            f" docs #{zlib.crc32(docs.detach().to(torch.int64).cpu().numpy().tobytes()):08x}"
        site = site_text(f"unshard {layout} {str(x_local.dtype).removeprefix('torch.')} "
                         f"[{sizes}]{docs_crc}")
    except Exception as reason:
        refuse_grouped_call(group, timeout, reason, site)
    agree(group, timeout, site, "unshard: the ranks' pieces, layouts or documents differ")
    p = group.size()
    lengths = _cpattn.all_gather(group, torch.tensor([x_local.shape[dim]]), float(timeout))
    lengths = [int(n) for n in lengths]
    longest = max(lengths)
    pad_shape = list(x_local.shape)
    pad_shape[dim] = longest - x_local.shape[dim]
    padded = torch.cat([x_local.detach(), x_local.new_zeros(pad_shape)], dim=dim).contiguous()
    pieces = _cpattn.all_gather(group, padded, float(timeout))
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
