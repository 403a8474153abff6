"""cpattn.attention and cpattn.ring_attention: autograd Functions over cpattn's C++ forward and
backward, whose forward state flows through the autograd context (never a module global)."""

import os
import sys
import weakref

import torch

from . import _cpattn
from ._checkpoint import active_record
from ._errors import Error, error
from ._rng import draw_rng_state, rng_of, rng_tensor
from ._sharding import resolve_group, whole_length

DEFAULT_TIMEOUT_S = 300.0

# The number of each process group's next checked call on this rank (the Python side of
# Communicator::take_call_number, whose C++ object lives for one call here): every rank numbers
# its calls alike, and the C++ call agreement compares the numbers, so ranks whose calls are out
# of step (a skipped call, backward in another order) fail instead of mixing their data. Keyed
# weakly by the group; a count, not forward state.
_next_call = weakref.WeakKeyDictionary()


def _take_call_number(group):
    if group is None:
        return 0
    n = _next_call.get(group, 0)
    _next_call[group] = n + 1
    return n


class _Attention(torch.autograd.Function):
    """One attention call. ctx keeps the non-tensor state (the C++ call description and the
    forward's Fingerprint); q, k, v, out, lse and the RngState that produced them are saved
    tensors, so activation checkpointing can drop and recompute them. Backward hands them to
    cpattn's attention_backward as a ForwardStateView: the C++ side checks that they belong to
    this call (shapes, strides, positions, parameters, q/k/v digest, RngState) before it
    computes anything."""

    @staticmethod
    def forward(ctx, q, k, v, call, group, dropout_p):
        seed, offset = draw_rng_state(dropout_p)
        out, lse, fingerprint = _cpattn.forward(call, _take_call_number(group), q, k, v, seed,
                                                offset)
        record = active_record()
        if record is not None:
            record.on_call(seed, offset, fingerprint.inputs_digest)
        ctx.call = call
        ctx.group = group
        ctx.fingerprint = fingerprint
        ctx.save_for_backward(q, k, v, out, lse, rng_tensor(seed, offset))
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, rng = ctx.saved_tensors
        seed, offset = rng_of(rng)
        dq, dk, dv = _cpattn.backward(ctx.call, _take_call_number(ctx.group), dout, q, k, v,
                                      out, lse, seed, offset, ctx.fingerprint)
        return dq, dk, dv, None, None, None


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _caller_site():
    """"file.py:42" of the first frame outside the cpattn package: where the user made the call
    (inside cpattn.checkpoint, the checkpointed function's line), the default call site."""
    frame = sys._getframe(1)
    while frame is not None and os.path.dirname(
            os.path.abspath(frame.f_code.co_filename)) == _PACKAGE_DIR:
        frame = frame.f_back
    if frame is None:
        return "cpattn"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _window(window_size):
    try:
        left, right = (int(w) for w in window_size)
    except (TypeError, ValueError):
        raise error("invalid_argument",
                    f"window_size must be a pair (left, right), got {window_size!r}") from None
    return left, right


def _doc_ids_error(doc_ids):
    """The error of doc_ids that are not a tensor (None when they are, or are None)."""
    if doc_ids is not None and not isinstance(doc_ids, torch.Tensor):
        return error("invalid_argument", "doc_ids must be an int64 tensor of the whole sequence")
    return None


def _refuse(group, timeout, reason, call_site):
    """Raises `reason` (a cpattn.Error, or the TypeError / ValueError of an argument that is not
    even of its type) after taking part in the group's call agreement as a rank that refuses the
    call: the other ranks raise rank_disagreement quoting it at once instead of waiting for it."""
    code = getattr(reason, "code", "invalid_argument")
    try:
        deadline = float(timeout) if float(timeout) > 0 else DEFAULT_TIMEOUT_S
    except (TypeError, ValueError):
        deadline = DEFAULT_TIMEOUT_S
    _cpattn.refuse(group, deadline, _take_call_number(group), code, str(reason), call_site, False)


def _run(q, k, v, *, group, layout, seq_len, kv_seq_len, dropout_p, softmax_scale, causal,
         window_size, doc_ids, return_lse, timeout, strategy, workspace, call_site):
    site = _caller_site() if call_site is None else str(call_site)
    try:  # the wrapper's own checks: a rank that fails them still joins the call agreement
        left, right = _window(window_size)
        bad_doc_ids = _doc_ids_error(doc_ids)
        if bad_doc_ids is not None:
            raise bad_doc_ids
        if group is None:
            cp_size, cp_rank = 1, 0
        else:
            cp_size, cp_rank = group.size(), group.rank()
        call = _cpattn.Call(layout, seq_len, layout, kv_seq_len, cp_size, cp_rank, doc_ids,
                            None if softmax_scale is None else float(softmax_scale),
                            bool(causal), left, right, float(dropout_p), group, float(timeout),
                            torch.get_num_threads(), str(strategy), workspace, site)
    except (Error, TypeError, ValueError) as reason:
        if group is None:
            raise
        _refuse(group, timeout, reason, site)
    out, lse = _Attention.apply(q, k, v, call, group, float(dropout_p))
    return (out, lse) if return_lse else out


def attention(q, k, v, *, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
              doc_ids=None, return_lse=False, call_site=None):
    """Exact attention on one rank (the formulas of docs/design.md section 1).

    q [B, S, Hq, Dqk], k [B, S, Hkv, Dqk], v [B, S, Hkv, Dv]: float32, bfloat16 or float16 CPU
    tensors of one dtype, any strides (BSHD views of BHSD memory included; no copies); out and
    the gradients come back in that dtype (fp32 accumulation, rounded once). Hq must be a multiple of Hkv (GQA/MQA).
    softmax_scale defaults to 1/sqrt(Dqk); window_size = (left, right) on positions, -1 for
    unbounded (flash-attn's convention); causal hides later keys; doc_ids, int64 [S], restricts
    attention to tokens of the same document (packed sequences). dropout_p drops attention
    probabilities with cpattn's counter-based dropout, its RngState drawn from torch's default
    CPU generator. Returns out [B, S, Hq, Dv] (dense BSHD), and with return_lse=True also
    lse float32 [B, Hq, S] (natural log; -inf for a row that sees no key; not differentiable).
    Differentiable in q, k and v. Raises cpattn.Error naming what is wrong. call_site names
    the call in error messages (see ring_attention)."""
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise error("shape_mismatch", "q must be a 4-dimensional tensor [B, S, Hq, Dqk]")
    return _run(q, k, v, group=None, layout="contiguous", seq_len=q.shape[1],
                kv_seq_len=k.shape[1], dropout_p=dropout_p, softmax_scale=softmax_scale,
                causal=causal, window_size=window_size, doc_ids=doc_ids, return_lse=return_lse,
                timeout=DEFAULT_TIMEOUT_S, strategy="ring", workspace=None, call_site=call_site)


def ring_attention(q, k, v, *, group=None, layout="zigzag", dropout_p=0.0, softmax_scale=None,
                   causal=False, window_size=(-1, -1), doc_ids=None, return_lse=False,
                   seq_len=None, timeout=DEFAULT_TIMEOUT_S, strategy="ring", workspace=None,
                   call_site=None):
    """Context-parallel attention over a torch.distributed process group: cpattn's C++ CP
    strategies, their messages sent with the group's send/recv (gloo on CPU).

    strategy (docs/strategies.md; `cpattn plan` recommends one): "ring" (k/v blocks passed round
    the group; every dtype), "allgather" (every rank gathers the whole k/v), "ulysses"
    (all-to-all to head-sharded, whole-sequence attention on Hq/P heads: Hq % P == 0 and
    Hkv % P == 0 or P % Hkv == 0) or "hybrid:UxR" (Ulysses inside rows of U ranks, a ring across
    R rows, U * R = P; the rows and columns are tag namespaces of this group, no new process
    groups). Other strategies than the ring take float32 only. Every strategy gives the same
    numbers to rounding and bit-identical dropout masks; a backward (or recompute) must use its
    forward's strategy, and ranks that pass different strategies raise rank_disagreement.

    workspace: a cpattn.Workspace whose buffers the call borrows for its scratch (travelling
    k/v blocks, accumulators, all-to-all staging) instead of fresh memory; keep one per process
    for a whole training loop (calls one at a time; results never live in it, and the numbers
    are bitwise the same with or without one).

    q, k, v are this rank's shards [B, S_r, H, D] of the whole sequence in `layout`
    ("zigzag", "striped" or "contiguous"; cpattn.shard cuts them); group defaults to the world
    group. The result is exactly the attention of the whole sequence for this rank's queries:
    cp=N gives cp=1's numbers (to rounding) and bit-identical dropout masks, provided every rank
    is seeded alike (torch.manual_seed). doc_ids is int64 [S] for the WHOLE sequence. seq_len
    is the whole length S (default: len(doc_ids), else the sum of the ranks' local lengths, one
    small all_reduce). Before any data moves, the ranks compare their calls (lengths, layouts,
    parameters, RngState, call numbers) and all raise cpattn.Error (code "rank_disagreement")
    naming what differs. Every wait has a deadline of
    `timeout` seconds: a rank that fails or stops makes the others raise cpattn.Error
    ("timeout" or "peer_failed") instead of hanging.

    call_site names where the call comes from (a layer index, a module path); by default it is
    the caller's "file.py:line". The ranks compare it too, so a rank that skipped a call raises
    at the call that follows, on every rank, naming both sites (two identical calls from one
    site cannot be told apart: name them, e.g. by layer, when a loop makes them alike). Other
    arguments and results as attention()."""
    group = resolve_group(group)
    site = _caller_site() if call_site is None else str(call_site)
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        reason = error("shape_mismatch", "q must be a 4-dimensional tensor [B, S_r, Hq, Dqk]")
        if doc_ids is None and seq_len is None:  # the others count the tokens first: join them
            whole_length(0, group, None, None, timeout)
        _refuse(group, timeout, reason, site)
    bad_doc_ids = _doc_ids_error(doc_ids)
    if bad_doc_ids is not None:  # before whole_length, which reads them
        _refuse(group, timeout, bad_doc_ids, site)
    total = whole_length(q.shape[1], group, doc_ids, seq_len, timeout)
    return _run(q, k, v, group=group, layout=layout, seq_len=total, kv_seq_len=total,
                dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                window_size=window_size, doc_ids=doc_ids, return_lse=return_lse, timeout=timeout,
                strategy=strategy, workspace=workspace, call_site=site)
