"""cpattn.sdpa and cpattn.context_parallel: torch.nn.functional.scaled_dot_product_attention's
signature on cpattn, on one rank or, inside the context, context-parallel over a group, the shape
of torch's own context_parallel (torch.distributed.tensor.experimental) without its module
globals: the state of each call flows through autograd (cpattn/_ops.py)."""

import contextlib
import contextvars
import sys
import threading

import torch
from torch.autograd.variable import Variable
from torch.overrides import TorchFunctionMode

from ._errors import error, known_to_the_group, mark_known_to_the_group
from ._groups import group_name_of, resolve_group
from ._ops import (DEFAULT_TIMEOUT_S, _caller_site, attention, refuse_grouped_call,
                   ring_attention)
from ._agreement import agree, site_text
from ._sharding import token_indices


# torch's SDPA itself (the builtin a TorchFunctionMode sees as `func`), not whatever
# torch.nn.functional.scaled_dot_product_attention names at the call: a wrapper installed there
# (a profiler's, a library's) still calls this builtin, which must still run on cpattn.
_TORCH_SDPA = torch._C._nn.scaled_dot_product_attention


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


def _check_buffers(buffers, seq_dims, layout):
    """The buffers' common length along their seq_dims entries (-1 for no buffers), after
    checking the layout (_check_layout) and the buffers: distinct tensors, each with that
    dimension, none requiring grad (a buffer is replaced by its shard in place: inputs such as
    ids and labels, not parameters or activations, whose .grad would take the shard's shape),
    none already this rank's shard of an enclosing context_parallel (it would be sharded
    twice; a one-rank context would run its SDPA calls on the shard alone)."""
    _check_layout(layout)
    outer = active_context()
    for i, buf in enumerate(buffers):
        if outer is not None and outer.whole_of(buf) is not None:
            raise error("invalid_argument", f"context_parallel: buffers[{i}] is already this "
                        f"rank's shard of an enclosing context_parallel")
        if isinstance(buf, torch.Tensor) and buf.is_inference() and \
                not torch.is_inference_mode_enabled():
            raise error("invalid_argument", f"context_parallel: buffers[{i}] is an inference "
                        f"tensor (made under torch.inference_mode), which the context cannot "
                        f"replace by its shard in place outside inference mode")
        if isinstance(buf, torch.Tensor) and buf.requires_grad:
            raise error("invalid_argument", f"context_parallel: buffers[{i}] requires grad; the "
                        f"context replaces its buffers by their shards in place, so they are "
                        f"inputs (ids, positions, labels), not parameters or activations")
    return _whole_length(buffers, seq_dims)


def _whole_length(buffers, seq_dims):
    """The buffers' common length along their seq_dims entries (-1 for no buffers), after
    checking that they are distinct tensors, each with that dimension."""
    if len(buffers) != len(seq_dims):
        raise error("invalid_argument", f"context_parallel: {len(buffers)} buffers but "
                    f"{len(seq_dims)} seq_dims (one sequence dimension per buffer)")
    for i, (buf, dim) in enumerate(zip(buffers, seq_dims)):
        if not isinstance(buf, torch.Tensor):
            raise error("invalid_argument", f"context_parallel: buffers[{i}] is a "
                        f"{type(buf).__name__}, not a tensor")
        if isinstance(dim, bool) or not isinstance(dim, int) or not -buf.dim() <= dim < buf.dim():
            raise error("invalid_argument", f"context_parallel: seq_dims[{i}] = {dim!r} is not a "
                        f"dimension of buffers[{i}] (shape {tuple(buf.shape)})")
        for j in range(i):
            if buffers[j] is buf:
                raise error("invalid_argument", f"context_parallel: buffers[{i}] is buffers[{j}] "
                            f"again (each tensor is replaced by its shard once)")
    lengths = [buf.shape[dim] for buf, dim in zip(buffers, seq_dims)]
    if len(set(lengths)) > 1:
        raise error("shape_mismatch", "context_parallel: the buffers' sequence lengths differ: " +
                    ", ".join(f"buffers[{i}] has {n}" for i, n in enumerate(lengths)) +
                    " (every buffer holds the whole sequence along its seq_dims entry)")
    return lengths[0] if lengths else -1


# The context_parallel that is active in this context, if any: its group and settings, for the
# integrations that run CP attention without going through SDPA (integrations/transformers.py).
# Configuration set and reset by the context manager, never call state.
_active = contextvars.ContextVar("cpattn_context_parallel", default=None)


def active_context():
    """The settings of the innermost active context_parallel (an object with .group (None for
    one rank), .layout, .strategy, .seq_len, .timeout, .workspace and .whole_of(buffer)), or
    None outside one."""
    return _active.get()


# Backward inside the context. torch pops a TorchFunctionMode while it handles a call, so
# loss.backward() (itself a torch function) would start autograd's engine with this mode off
# its stack, and the graph task runs every node with the stack it started with: the recompute
# of activation checkpointing would run torch's SDPA on this rank's shard (a CheckpointError
# with use_reentrant=False, gradients of the wrong attention with use_reentrant=True). So a
# backward called inside the context starts the engine with the mode pushed again: the entry
# points run as they are, while a wrapper (_ResumingEngine) stands in for torch's engine
# object (Variable._execution_engine, whose run_backward every backward calls) and pushes the
# mode around run_backward, on the calling thread only. Patch bookkeeping (the wrapper is
# installed while such a backward runs), not call state.
_ENGINE_ENTRIES = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)
_engine_lock = threading.Lock()
_engine_modes = {}  # thread id -> the modes whose backward runs on that thread (innermost last)
_engine_real = []   # torch's engine while the wrapper stands in for it


class _ResumingEngine:
    """torch's autograd engine, with run_backward run under the mode of the calling thread's
    innermost backward inside a context (every other attribute is the engine's)."""

    def __init__(self, real):
        self._real = real

    def run_backward(self, *args, **kwargs):
        modes = _engine_modes.get(threading.get_ident())
        if not modes:
            return self._real.run_backward(*args, **kwargs)
        with modes[-1]:
            return self._real.run_backward(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._real, name)


@contextlib.contextmanager
def _engine_resumes(mode):
    """While it is open, a backward that this thread runs starts the engine under `mode`."""
    tid = threading.get_ident()
    with _engine_lock:
        if not _engine_real:
            _engine_real.append(Variable._execution_engine)
            Variable._execution_engine = _ResumingEngine(_engine_real[0])
        _engine_modes.setdefault(tid, []).append(mode)
    try:
        yield
    finally:
        with _engine_lock:
            _engine_modes[tid].pop()
            if not _engine_modes[tid]:
                del _engine_modes[tid]
            if not _engine_modes:
                Variable._execution_engine = _engine_real.pop()


class _SdpaMode(TorchFunctionMode):
    """Runs every scaled_dot_product_attention call on cpattn: cpattn.sdpa for group None, else
    the CP attention of this rank's shard over the group, also the calls that a backward run
    inside the context makes (activation checkpointing's recompute). Every other function runs
    as it is. Counts the calls (the exit agreement of context_parallel)."""

    def __init__(self, group=None, layout=None, strategy=None, seq_len=None,
                 timeout=DEFAULT_TIMEOUT_S, workspace=None, buffers=(), wholes=()):
        super().__init__()
        self.group, self.layout, self.strategy = group, layout, strategy
        self.seq_len, self.timeout, self.workspace = seq_len, timeout, workspace
        self.buffers, self.wholes = list(buffers), list(wholes)
        self.calls = 0
        self.outer = active_context()  # the context this one is nested in, if any

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
        if func in _ENGINE_ENTRIES:  # the backward runs under this mode too (see above)
            with _engine_resumes(self):
                return func(*args, **kwargs)
        if func is not _TORCH_SDPA:
            return func(*args, **kwargs)
        self.calls += 1
        if self.group is None:
            return sdpa(*args, **kwargs)
        return self.ring(*args, **kwargs)

    def ring(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
             scale=None, enable_gqa=False):
        """The CP attention of this rank's q, k, v. A call refused here (attn_mask, tensors
        that are not 4-D...) still joins the group's call agreement as refusing, as
        ring_attention's own refusals do, so the other ranks raise at once."""
        site = _caller_site()
        try:
            q, k, v = _bshd(query, key, value, attn_mask, is_causal, enable_gqa)
        except Exception as reason:
            # (query, value) shape a compiled refusal like SDPA's output
            return refuse_grouped_call(self.group, self.timeout, reason, site, (query, value))
        out = ring_attention(q, k, v, group=self.group, layout=self.layout, dropout_p=dropout_p,
                             softmax_scale=scale, causal=is_causal, seq_len=self.seq_len,
                             timeout=self.timeout, strategy=self.strategy,
                             workspace=self.workspace, call_site=site)
        return out.transpose(1, 2)


def _check_layout(layout):
    """Refuses "doc_zigzag": the context shards its buffers on entry, before any SDPA call says
    where the documents are, so it cannot split each document (ring_attention or
    varlen_ring_attention with cpattn.shard(..., doc_ids= or cu_seqlens=) can)."""
    if layout == "doc_zigzag":
        raise error("invalid_argument", "context_parallel: layout doc_zigzag splits each document "
                    "over the ranks, but the context shards its buffers before it knows the "
                    "documents; shard with cpattn.shard(x, doc_ids=...) and call ring_attention "
                    "or varlen_ring_attention instead")


def _announce_failure(group, timeout, failure):
    """Tells the other ranks that this one leaves a context_parallel block with `failure`,
    unless they know of it already (known_to_the_group: it came from an exchange over the group,
    which fails every rank that takes part, or an inner context announced it): this rank joins
    the group's next call agreement as refusing, so ranks at their next SDPA call, backward or
    exit raise rank_disagreement quoting it at once, instead of waiting for this rank until
    their deadline (or meeting its next step). Each failure is announced once: `failure` is then
    marked known. The announcement waits for them at most that deadline (ranks that crashed
    close their connections: at once); what it raises itself is dropped, since the caller
    re-raises `failure`."""
    name = group_name_of(group)
    if known_to_the_group(failure, name):
        return
    mark_known_to_the_group(failure, name)
    try:
        text = f"{type(failure).__name__}: {failure}"
    except Exception:  # noqa: BLE001 - an exception whose str() fails is announced by its type
        text = f"{type(failure).__name__} (whose message could not be read)"
    reason = error("peer_failed", f"rank {group.rank()} left the context_parallel block with "
                   f"{text}")
    try:
        refuse_grouped_call(group, timeout, reason, "context exit: an exception")
    except Exception:  # noqa: BLE001 - the block's own exception is the one to raise
        pass


# The number of CP contexts each process group (by name) has entered in this process, counted
# from 0 (outermost ones only: a context nested in one over the same group belongs to its step):
# the entry agreement compares it, so ranks a step apart (one left a step's block early and went
# on) fail loudly instead of running different steps together. Like the ops' call numbers, a
# count per group, never call state.
_context_entries = {}


def _nested_over(group_name):
    """Whether an active context_parallel over the group named `group_name` encloses this one."""
    cp = active_context()
    while cp is not None:
        if cp.group is not None and cp.group.group_name == group_name:
            return True
        cp = cp.outer
    return False


@contextlib.contextmanager
def context_parallel(group, buffers=(), seq_dims=(), *, layout="zigzag", strategy=None,
                     timeout=DEFAULT_TIMEOUT_S, workspace=None):
    """Context parallelism for model code that calls scaled_dot_product_attention.

        with cpattn.context_parallel(group, buffers=[input_ids, position_ids, labels],
                                     seq_dims=[1, 1, 1]):
            logits = model(input_ids, position_ids=position_ids)  # this rank's tokens
            F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum").backward()

    (labels shifted on the whole sequence before the context: a model's own shift of labels=
    inside forward would pair this rank's tokens with the wrong next tokens.)

    On entry, each buffer (the whole sequence's tensors: input ids, position ids, labels...) is
    replaced in place (Tensor.set_) by this rank's shard of it along its seq_dims entry, in
    `layout` ("zigzag", "striped", "contiguous"; "doc_zigzag" is refused: the buffers are
    sharded before the documents are known); on exit every buffer gets its whole tensor
    back. Inside, every torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None,
    dropout_p, is_causal, scale, enable_gqa) call (BHSD, of this rank's tokens) runs
    cpattn.ring_attention over the group with `strategy` (docs/strategies.md; default the ring,
    or a 2-D mesh's hybrid), exact for the whole sequence, dropout masks bit-identical to cp=1.
    What cpattn cannot honour (a dense attn_mask, an SDPA call of other tensors than 4-D)
    raises cpattn.Error naming it, never a silent fallback. Position ids must be among the
    buffers when the model computes positions (RoPE): a model that makes them from
    arange(local length) would use the wrong ones.

    group: a ProcessGroup or a DeviceMesh (as ring_attention takes, 2-D for the hybrid), or
    None or a group of one: one rank, the buffers untouched (but checked as below), SDPA on
    cpattn.sdpa, so the same training code serves cp=1 (nested inside a CP context, such a
    context runs its SDPA calls on this rank's tensors alone: for a sub-model whose inputs are
    not sharded). The buffers must be distinct tensors of one length along their seq_dims
    entries, none requiring grad (cpattn.Error otherwise). Agreement (cpattn.Error code
    "rank_disagreement" on every rank, never a hang): on entry the ranks compare the buffers'
    sequence lengths, seq_dims and the layout, on a normal exit the number of SDPA calls each
    made (a rank that
    ran a different model or skipped a layer), both in cpattn's call agreement (a tiny
    attention call named for them), so a rank that meanwhile is at an SDPA call, or whose
    buffers are refused, fails every rank at once too. The entry agreement also compares how
    many CP contexts each rank has entered over the group, so ranks a step apart fail loudly. A
    rank whose block raises an exception the others have not learnt of (one of its own code, a
    one-rank cpattn call's; not an error of a call over the group, which every rank taking part
    raised) joins the others' next call agreement as refusing before it re-raises it, so they
    raise rank_disagreement naming it ("rank 1 left the context_parallel block with ValueError:
    ...") at their next SDPA call, backward or exit, not at their deadline. Every wait has the
    deadline `timeout` (seconds). workspace: a cpattn.Workspace every call borrows its scratch
    from. The backward must run inside the block (a graph that saved a buffer refuses once it
    is whole again; with use_reentrant=True checkpointing and no saved buffer, a backward after
    the block recomputes with torch's SDPA on this rank's tokens, unseen by cpattn); a
    transformers model with transformers' own attn_implementation="sdpa" is refused under a
    group (it decides its masks from this rank's shard: use attn_implementation="cpattn"); only
    F.scaled_dot_product_attention is intercepted (not torch.ops.aten's SDPA ops); a buffer an
    enclosing context already sharded is refused, by a one-rank context too; so is a buffer
    made under torch.inference_mode, outside inference mode."""
    buffers, seq_dims = list(buffers), list(seq_dims)
    if group is not None:
        group, strategy = resolve_group(group, strategy)
    if group is not None and group.size() > 1 and "transformers.modeling_utils" in sys.modules:
        from .integrations.transformers import guard_sdpa
        guard_sdpa()  # transformers' sdpa attention would take this rank's shard for the whole
    if group is None or group.size() == 1:
        _check_buffers(buffers, seq_dims, layout)  # as under CP: the same code serves cp=1
        with _SdpaMode(timeout=timeout, workspace=workspace).active():
            yield
        return

    name = group_name_of(group)
    if _nested_over(name):  # a sub-model's context inside the step's: that step's count
        entry = f"{_context_entries[name] - 1} (nested)"
    else:
        entry = _context_entries.get(name, 0)
        _context_entries[name] = entry + 1
    try:  # a rank whose buffers are refused still joins the entry agreement, as refusing
        seq_len = _check_buffers(buffers, seq_dims, layout)
        idx = token_indices(layout, seq_len, group) if buffers else None
    except Exception as reason:
        refuse_grouped_call(group, timeout, reason, "context entry")
    dims = ",".join(str(d % buf.dim()) for buf, d in zip(buffers, seq_dims))
    agree(group, timeout, site_text(
        f"context entry {entry}: {seq_len} tokens, {layout}, seq_dims {dims}" if buffers
        else f"context entry {entry}: no buffers, {layout}"),
        "context_parallel: the ranks do not enter the context alike (their buffers hold "
        "sequences of different lengths or along other dims, their layouts differ, a rank "
        "is elsewhere, or a rank is at another step: its number of contexts entered differs)")
    wholes = []  # aliases of each sharded buffer's whole tensor (its storage, sizes, strides)
    try:
        with torch.no_grad():
            for buf, dim in zip(buffers, seq_dims):
                whole = buf.detach()
                buf.set_(buf.index_select(dim, idx.to(buf.device)))
                wholes.append(whole)
        mode = _SdpaMode(group, layout, strategy, None if seq_len < 0 else seq_len, timeout,
                         workspace, buffers, wholes)
        with mode.active():
            yield
    except Exception as failure:
        _announce_failure(group, timeout, failure)
        raise
    finally:
        with torch.no_grad():
            for buf, whole in zip(buffers, wholes):
                buf.set_(whole)
    n = mode.calls
    agree(group, timeout, f"context_parallel exit after {n} SDPA call" +
          ("" if n == 1 else "s"), "context_parallel: the ranks leave the context after "
          "different numbers of scaled_dot_product_attention calls, or a rank is still in one")
