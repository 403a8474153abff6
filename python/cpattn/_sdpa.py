"""cpattn.sdpa and cpattn.context_parallel: torch.nn.functional.scaled_dot_product_attention's
signature on cpattn, on one rank or, inside the context, context-parallel over a group, the shape
of torch's own context_parallel (torch.distributed.tensor.experimental) without its module
globals: the state of each call flows through autograd (cpattn/_ops.py)."""

import contextlib
import contextvars

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from . import _cpattn
from ._errors import error
from ._groups import resolve_group
from ._ops import DEFAULT_TIMEOUT_S, attention, ring_attention
from ._sharding import token_indices


def _bshd(query, key, value, attn_mask, is_causal, enable_gqa):
    """SDPA's BHSD q, k, v as BSHD views (no copies), after refusing what cpattn cannot
    honour, naming the argument."""
    if attn_mask is not None:
        raise error("invalid_argument", "scaled_dot_product_attention: attn_mask is not "
                    "supported by cpattn (a dense mask); use is_causal, or cpattn.attention's "
                    "window_size / doc_ids for windows and packed documents")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise error("shape_mismatch", f"scaled_dot_product_attention: cpattn takes 4-D "
                        f"[B, H, S, D] tensors, {name} is "
                        f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    hq, hkv = query.shape[1], key.shape[1]
    if hq != hkv and not enable_gqa:
        raise error("shape_mismatch", f"scaled_dot_product_attention: query has {hq} heads, "
                    f"key {hkv}: pass enable_gqa=True for grouped-query attention")
    if not isinstance(is_causal, bool):
        raise error("invalid_argument", f"scaled_dot_product_attention: is_causal must be a "
                    f"bool, got {is_causal!r}")
    return query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
         enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention on one rank, computed by cpattn.

    query [B, Hq, Sq, D], key [B, Hkv, Sk, D], value [B, Hkv, Sk, Dv] (BHSD, as SDPA takes them:
    float32, bfloat16 or float16 CPU tensors, any strides); returns [B, Hq, Sq, Dv] (a BHSD
    view of cpattn's dense BSHD output). is_causal hides key j from query i when j > i (SDPA's
    top-left alignment); scale defaults to 1/sqrt(D); Hq != Hkv needs enable_gqa=True, as in
    SDPA. dropout_p uses cpattn's dropout (its masks are a pure function of torch's generator
    state: not SDPA's masks, but the same distribution). attn_mask must be None: a dense mask
    raises cpattn.Error naming it, never a silent fallback."""
    q, k, v = _bshd(query, key, value, attn_mask, is_causal, enable_gqa)
    return attention(q, k, v, dropout_p=dropout_p, softmax_scale=scale,
                     causal=is_causal).transpose(1, 2)


def _gathered(group, value, timeout):
    """Every rank's `value` (an int), by rank: cpattn's fixed-order sum of a vector with this
    rank's value in its own slot (bitwise the same on every rank, under the deadline)."""
    slots = torch.zeros(group.size(), dtype=torch.float64)
    slots[group.rank()] = float(value)  # exact below 2^53
    _cpattn.allreduce_sum(group, slots, float(timeout))
    return [int(x) for x in slots.tolist()]


# The context_parallel that is active in this context, if any: its group and settings, for the
# integrations that run CP attention without going through SDPA (integrations/transformers.py).
# Configuration set and reset by the context manager, never call state.
_active = contextvars.ContextVar("cpattn_context_parallel", default=None)


def active_context():
    """The settings of the innermost active context_parallel (an object with .group (None for
    one rank), .layout, .strategy, .seq_len, .timeout, .workspace and .whole_of(buffer)), or
    None outside one."""
    return _active.get()


class _SdpaMode(TorchFunctionMode):
    """Runs every scaled_dot_product_attention call on cpattn: cpattn.sdpa for group None, else
    the CP attention of this rank's shard over the group. Every other function runs as it is.
    Counts the calls (the exit agreement of context_parallel)."""

    def __init__(self, group=None, layout=None, strategy=None, seq_len=None,
                 timeout=DEFAULT_TIMEOUT_S, workspace=None, buffers=(), wholes=()):
        super().__init__()
        self.group, self.layout, self.strategy = group, layout, strategy
        self.seq_len, self.timeout, self.workspace = seq_len, timeout, workspace
        self.buffers, self.wholes = list(buffers), list(wholes)
        self.calls = 0

    def whole_of(self, buffer):
        """The whole tensor of a buffer this context sharded (None when `buffer` is not one)."""
        for b, whole in zip(self.buffers, self.wholes):
            if b is buffer:
                return whole
        return None

    @contextlib.contextmanager
    def active(self):
        """This mode on torch's stack and as the active context_parallel."""
        token = _active.set(self)
        try:
            with self:
                yield
        finally:
            _active.reset(token)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not F.scaled_dot_product_attention:
            return func(*args, **kwargs)
        self.calls += 1
        if self.group is None:
            return sdpa(*args, **kwargs)
        return self.ring(*args, **kwargs)

    def ring(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
             scale=None, enable_gqa=False):
        q, k, v = _bshd(query, key, value, attn_mask, is_causal, enable_gqa)
        out = ring_attention(q, k, v, group=self.group, layout=self.layout, dropout_p=dropout_p,
                             softmax_scale=scale, causal=is_causal, seq_len=self.seq_len,
                             timeout=self.timeout, strategy=self.strategy,
                             workspace=self.workspace)
        return out.transpose(1, 2)


@contextlib.contextmanager
def context_parallel(group, buffers=(), seq_dims=(), *, layout="zigzag", strategy="ring",
                     timeout=DEFAULT_TIMEOUT_S, workspace=None):
    """Context parallelism for model code that calls scaled_dot_product_attention.

        with cpattn.context_parallel(group, buffers=[input_ids, position_ids, labels],
                                     seq_dims=[1, 1, 1]):
            loss = model(input_ids, position_ids=position_ids, labels=labels)
            loss.backward()

    On entry, each buffer (the whole sequence's tensors: input ids, position ids, labels...) is
    replaced in place (Tensor.set_) by this rank's shard of it along its seq_dims entry, in
    `layout` ("zigzag", "striped", "contiguous"); on exit every buffer gets its whole tensor
    back. Inside, every torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None,
    dropout_p, is_causal, scale, enable_gqa) call (BHSD, of this rank's tokens) runs
    cpattn.ring_attention over the group with `strategy` (docs/strategies.md), exact for the
    whole sequence, dropout masks bit-identical to cp=1. What cpattn cannot honour (a dense
    attn_mask, an SDPA call of other tensors than 4-D) raises cpattn.Error naming it, never a
    silent fallback. Position ids must be among the buffers when the model computes positions
    (RoPE): a model that makes them from arange(local length) would use the wrong ones.

    group: a ProcessGroup or a DeviceMesh (as ring_attention takes, 2-D for the hybrid), or
    None or a group of one: one rank, the buffers untouched, SDPA on cpattn.sdpa, so the same
    training code serves cp=1. Agreement (cpattn.Error code "rank_disagreement" on every rank,
    never a hang): on entry the ranks compare the buffers' sequence lengths, on a normal exit
    the number of SDPA calls each made (a rank that ran a different model or skipped a layer).
    Every wait has the deadline `timeout` (seconds). workspace: a cpattn.Workspace every call
    borrows its scratch from."""
    buffers, seq_dims = list(buffers), list(seq_dims)
    if len(buffers) != len(seq_dims):
        raise error("invalid_argument", f"context_parallel: {len(buffers)} buffers but "
                    f"{len(seq_dims)} seq_dims (one sequence dimension per buffer)")
    if group is not None:
        group, strategy = resolve_group(group, strategy)
    if group is None or group.size() == 1:
        with _SdpaMode(timeout=timeout, workspace=workspace).active():
            yield
        return

    lengths = {buf.shape[dim] for buf, dim in zip(buffers, seq_dims)}
    if len(lengths) > 1:
        raise error("shape_mismatch", f"context_parallel: the buffers' sequence lengths differ: "
                    f"{sorted(lengths)} (every buffer holds the whole sequence along its "
                    f"seq_dims entry)")
    seq_len = lengths.pop() if lengths else -1
    every = _gathered(group, seq_len, timeout)
    if len(set(every)) > 1:
        raise error("rank_disagreement", "context_parallel: the ranks' buffers hold sequences "
                    "of different lengths: " + ", ".join(f"rank {r}: {n}" if n >= 0 else
                                                         f"rank {r}: no buffers"
                                                         for r, n in enumerate(every)))
    wholes = []  # aliases of each buffer's whole tensor (its storage, sizes and strides)
    with torch.no_grad():
        for buf, dim in zip(buffers, seq_dims):
            idx = token_indices(layout, buf.shape[dim], group).to(buf.device)
            wholes.append(buf.detach())
            buf.set_(buf.index_select(dim, idx))
    mode = _SdpaMode(group, layout, strategy, None if seq_len < 0 else seq_len, timeout,
                     workspace, buffers, wholes)
    try:
        with mode.active():
            yield
    finally:
        with torch.no_grad():
            for buf, whole in zip(buffers, wholes):
                buf.set_(whole)
    calls = _gathered(group, mode.calls, timeout)
    if len(set(calls)) > 1:
        raise error("rank_disagreement", "context_parallel: the ranks made different numbers "
                    "of scaled_dot_product_attention calls: " +
                    ", ".join(f"rank {r}: {n}" for r, n in enumerate(calls)))

