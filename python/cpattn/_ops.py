"""The torch.library operators of cpattn (namespace "cpattn") and the functions over them,
cpattn.attention, cpattn.ring_attention, cpattn.varlen_attention and
cpattn.varlen_ring_attention.

Five custom ops, each traced by torch.compile as one opaque node:
  cpattn::draw_rng_state(Tensor q, Tensor[] others, float dropout_p) -> Tensor
                                                                int64 [2]: a call's (seed, offset)
  cpattn::take_call_number(Tensor q, str group_name) -> Tensor  int64 [1]: the group's next number
  cpattn::attention_forward(q, k, v, rng, call_number, <docs>, sink, alibi_slopes, slices,
                            <call>, for_backward=True) -> (out, lse, fingerprint)
  cpattn::attention_backward(dout, q, k, v, out, lse, rng, fingerprint, state_fingerprint,
                             call_number, <docs>, sink, alibi_slopes, slices, <call>)
                             -> (dq, dk, dv, dsink)
  cpattn::refuse_call(q, v, group_name, timeout, code, message, call_site) -> (out, lse)
                             a grouped call refused while dynamo traced it, refused when it runs
where <docs> is (doc_ids, cu_seqlens_q, cu_seqlens_k), the optional int64 tensors that say
where packed documents sit (document ids, or flash-attn's cumulative lengths of a varlen call),
<call> the call's non-tensor arguments (_CALL_ARGS), and sink, alibi_slopes (float32 [Hq]) and
slices (int64 [n, 5]) are optional tensors (the sink logits are differentiable). The first two
are the only ops with side effects on a call that runs (torch's generator; the group's call
counter; refuse_call only raises, after its part of the group's exchanges). The three are
tagged nondeterministic_seeded, so torch.compile neither merges nor drops them, and a compiled
forward recomputed under activation checkpointing replays the first two with the saved
generator state
(run_and_save_rng_state, which takes the device of their tensor argument q): the same RngState,
so the eager bits; a replayed take_call_number takes the next number, as an eager recompute
does, alike on every rank. attention_forward and attention_backward are pure functions of their
inputs.

The forward state (out, lse, the RngState tensor, the fingerprint) travels only through
autograd: attention_forward's autograd saves q, k, v, out, lse, rng and the fingerprint as saved
tensors (which activation checkpointing drops and recomputes) and keeps the fingerprint of the
FIRST forward on its context, so a backward whose recomputed state differs from the one the loss
was computed with (other dropout masks, other inputs, another softcap, scale, mask or dropout_p)
is refused by the C++ side instead of giving wrong gradients.
"""

import math
import operator
import os
import sys
import weakref
import zlib
from typing import Optional

import torch
import torch.autograd.forward_ad as fwAD
# torch's custom-op dispatch imports torch._dynamo (seconds) at an op's first call; importing it
# with the package keeps that time out of the first call's deadline.
import torch._dynamo  # noqa: F401

from . import _cpattn
from ._checkpoint import active_record
from ._errors import Error, error, exchange_over, over_the_group
from ._groups import group_name_of, process_group, resolve_group

DEFAULT_TIMEOUT_S = 300.0

# ---------------------------------------------------------------------------------------------
# The ops with side effects.

_U64 = (1 << 64) - 1


@torch.library.custom_op("cpattn::draw_rng_state", mutates_args=(), device_types="cpu",
                         tags=(torch.Tag.nondeterministic_seeded,))
def draw_rng_state(q: torch.Tensor, others: list[torch.Tensor],
                   dropout_p: float) -> torch.Tensor:
    """The dropout RngState of the call on q, int64 [2] (seed, offset as two's-complement
    words), drawn from torch's default generator of q's device (CPU; no tensor's values are
    read; `others` are the call's other tensor arguments, there for torch.func.vmap, which runs
    the op's vmap rule when any of them is batched):
    torch.manual_seed makes runs repeatable, ranks seeded alike draw the same state (so cp=N
    uses cp=1's dropout masks), and activation checkpointing replays it in the recompute
    (torch.utils.checkpoint's preserve_rng_state; under torch.compile, the partitioner's
    run_and_save_rng_state, which needs q's device). dropout_p = 0 consumes no random numbers
    and gives (0, 0)."""
    return _draw(dropout_p)


def _draw(dropout_p):
    """draw_rng_state's draw: (0, 0) for dropout_p = 0, else two int64 words uniform in
    [-2^63, 2^63 - 1) from torch's default CPU generator (torch.randint, a random op of torch's:
    vmap sees it as one)."""
    if dropout_p == 0.0:
        return torch.zeros(2, dtype=torch.int64)
    return torch.randint(-(1 << 63), (1 << 63) - 1, (2,), dtype=torch.int64)


@draw_rng_state.register_fake
def _(q, others, dropout_p):
    return q.new_empty(2, dtype=torch.int64)


@draw_rng_state.register_vmap
def _(info, in_dims, q, others, dropout_p):
    """Under torch.func.vmap the draw is torch.randint's under vmap, so it follows vmap's
    `randomness` as torch's own dropout does: "error" (vmap's default) raises torch's error,
    "same" draws one state that every sample shares (the same masks), "different" one state per
    sample (randint returns them batched at this level already: out_dims None)."""
    return _draw(dropout_p), None


# The number of each process group's next checked call on this rank, by group name (the Python
# side of Communicator::take_call_number, whose C++ object lives for one call here): every rank
# numbers its calls alike, and the C++ call agreement compares the numbers, so ranks whose calls
# are out of step (a skipped call, backward in another order) fail instead of mixing their data.
# A count per group, not forward state.
_next_call = {}


@torch.library.custom_op("cpattn::take_call_number", mutates_args=(), device_types="cpu",
                         tags=(torch.Tag.nondeterministic_seeded,))
def take_call_number(q: torch.Tensor, group_name: str) -> torch.Tensor:
    """This rank's next call number on the group named `group_name` ("" for one rank: always
    0), int64 [1], for the call on q (its values are not read); every forward and backward
    takes one."""
    return torch.tensor([_next_number(group_name)], dtype=torch.int64)


def _next_number(group_name):
    """take_call_number's count (also for a call refused before it has tensors)."""
    if not group_name:
        return 0
    n = _next_call.get(group_name, 0)
    _next_call[group_name] = n + 1
    return n


@take_call_number.register_fake
def _(q, group_name):
    return q.new_empty(1, dtype=torch.int64)


# ---------------------------------------------------------------------------------------------
# Workspaces: an op argument is an int, so a call names its cpattn.Workspace by a number that
# the registry maps back to the object while it lives (weakly: the caller owns it).

_workspaces = {}


def _workspace_id(workspace):
    if workspace is None:
        return 0
    if not isinstance(workspace, _cpattn.Workspace):
        raise error("invalid_argument", f"workspace must be a cpattn.Workspace, got "
                    f"{type(workspace).__name__}")
    key = id(workspace)
    if key not in _workspaces:
        _workspaces[key] = weakref.ref(workspace, lambda _ref, k=key: _workspaces.pop(k, None))
    return key


def _workspace_of(workspace_id):
    if workspace_id == 0:
        return None
    ref = _workspaces.get(workspace_id)
    workspace = ref() if ref is not None else None
    if workspace is None:
        raise error("invalid_argument", "the call's cpattn.Workspace was freed before the call "
                    "(keep it alive while a compiled function that uses it runs)")
    return workspace


# ---------------------------------------------------------------------------------------------
# The attention ops.

# The non-tensor arguments every attention op takes, in schema order (after its tensors).
# max_seqlen_q / max_seqlen_k: a varlen call's (flash-attn's) longest-document bounds, -1 for
# other calls.
_CALL_ARGS = ("group_name", "layout", "seq_len", "kv_seq_len", "softmax_scale", "causal",
              "window_left", "window_right", "dropout_p", "softcap", "timeout", "strategy",
              "workspace_id", "call_site", "max_seqlen_q", "max_seqlen_k")
# The optional tensor arguments after doc_ids, in schema order.
_PARAM_TENSORS = ("sink", "alibi_slopes", "slices")


def _deadline(timeout):
    """(seconds, None) for a valid `timeout` (timeout_of_seconds' range), else (the default
    deadline, the error that refuses it): what a rank that refuses a call waits for the group."""
    try:
        _cpattn.check_timeout(float(timeout))
        return float(timeout), None
    except Exception as e:  # Error, or float() refusing the value (TypeError, OverflowError...)
        return DEFAULT_TIMEOUT_S, e


@over_the_group
def count_tokens(q_tokens, k_tokens, group, timeout, site=""):
    """The whole sequence's (q, k) token counts of a call from call site `site` whose rank holds
    q_tokens queries and k_tokens keys: the sums over the group (cpattn's all-reduce, under the
    call's deadline of `timeout` seconds: a rank that never joins raises cpattn.Error). Every
    call over a group makes this one exchange first. q_tokens None: this rank refuses the call
    before it; it adds NaN, which tells every other rank so (it gets None back): they raise
    cpattn.Error rank_disagreement, which, passed on to their refusal (_refuse), makes the call
    agreement quote the refusing rank's reason. A `timeout` that is itself refused (not in
    timeout_of_seconds' range) makes this rank count as refusing, under the default deadline,
    and raise that error. The sums also carry a 16-bit hash h of `site` (h and h^2: all equal
    only when P * sum(h^2) == sum(h)^2): ranks at calls from different sites (a rank that
    skipped a call) would count the tokens of different calls, so each raises
    rank_disagreement naming its own site, which the call agreement then quotes for every
    rank."""
    deadline, bad_timeout = _deadline(timeout)
    refusing = q_tokens is None or bad_timeout is not None
    h = float(zlib.crc32(site.encode()) & 0xFFFF)  # P * h^2 < 2^53: the sums are exact
    total = torch.tensor([float("nan")] * 4 if refusing else
                         [float(q_tokens), float(k_tokens), h, h * h], dtype=torch.float64)
    _cpattn.allreduce_sum(group, total, deadline)
    if q_tokens is None:
        return None
    if bad_timeout is not None:
        raise bad_timeout
    if math.isnan(total[0]):
        raise error("rank_disagreement", "another rank refuses this call before making it")
    if group.size() * float(total[3]) != float(total[2]) ** 2:
        raise error("rank_disagreement", f"the calls come from different call sites: rank "
                    f"{group.rank()} at {site} (did a rank skip a call, or make one the others "
                    f"did not?)")
    return int(total[0]), int(total[1])


def _call_of(call_number, q, k, doc_ids, cu_seqlens_q, cu_seqlens_k, sink, alibi_slopes, slices,
             group_name, layout, seq_len, kv_seq_len, softmax_scale, causal, window_left,
             window_right, dropout_p, softcap, timeout, strategy, workspace_id, call_site,
             max_seqlen_q, max_seqlen_k, backward):
    """The C++ description of one call (_cpattn.Call). Over a group the ranks' local q and k
    lengths are summed first (a small all-reduce): seq_len < 0 is the q sum (the C++ call
    checks that another seq_len fits the shards); kv_seq_len < 0 is the k sum for a varlen call
    (cu_seqlens given), else seq_len. A rank whose arguments are refused still takes part in
    the group's call agreement, as a rank that refuses the call, so the other ranks raise at
    once instead of waiting for it (what those exchanges raise is known to the group)."""
    group = process_group(group_name)
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    counted = False
    try:
        if group is not None:
            # Every call over a group counts the ranks' tokens first, with or without a seq_len,
            # so every rank makes the same exchanges in the same order even when the ranks were
            # given different arguments (seq_len or doc_ids on one rank only): they then meet
            # in the call agreement, which names what differs, and the group stays usable.
            local = (q.shape[1], k.shape[1])
            counted = True  # count_tokens is this rank's part of the exchange, whatever it raises
            counted_q, counted_k = count_tokens(*local, group, timeout, call_site)
            if seq_len < 0:
                seq_len = counted_q
            if kv_seq_len < 0 and varlen:
                kv_seq_len = counted_k
        elif varlen and kv_seq_len < 0:
            kv_seq_len = k.shape[1]
        return _cpattn.Call(group=group, layout=layout, seq_len=seq_len,
                            kv_seq_len=None if kv_seq_len < 0 else kv_seq_len, doc_ids=doc_ids,
                            cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                            max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                            softmax_scale=softmax_scale, causal=causal,
                            window_left=window_left, window_right=window_right,
                            dropout_p=dropout_p, softcap=softcap, alibi_slopes=alibi_slopes,
                            sink=sink, slices=slices, timeout=timeout,
                            num_threads=torch.get_num_threads(), strategy=strategy,
                            workspace=_workspace_of(workspace_id), call_site=call_site)
    except Exception as reason:  # whatever a bad argument raises: the rank still takes part
        if group is None:
            raise
        if not counted:
            count_tokens(None, None, group, timeout)
        _refuse(group, timeout, reason, call_site, int(call_number[0]), backward)


def refuse_grouped_call(group, timeout, reason, call_site, like=None, return_lse=False):
    """Raises `reason` for a forward call over `group` that this rank refuses before the op
    (the package's own argument checks), after joining what the other ranks' op does first:
    the token count, as a rank that refuses (count_tokens), and the call agreement as a rank
    that refuses, so the others raise at once, quoting it. While torch.compile traces the call
    (dynamo runs these checks then), with `like` = the call's (q, v) (out's shape is q's with
    v's last dimension) it returns instead the outputs of a refuse_call op, which makes this
    refusal when the compiled code runs: out, or (out, lse) with return_lse, for the caller to
    return."""
    if like is not None and torch.compiler.is_compiling():
        try:
            seconds = float(timeout)
        except Exception:  # not a number: refuse_call refuses under the default deadline
            seconds = math.nan
        q, v = (t.detach() if isinstance(t, torch.Tensor) else torch.empty(0) for t in like)
        out, lse = refuse_call(q, v, group_name_of(group), seconds, *_refusal(reason),
                               call_site)
        return (out, lse) if return_lse else out
    count_tokens(None, None, group, timeout)
    _refuse(group, timeout, reason, call_site, _next_number(group_name_of(group)))


def _refusal(reason):
    """(code, message) a refusal for `reason` carries: reason's code (invalid_argument for
    other exceptions) and its text (with its type's name for other than a cpattn.Error, or the
    TypeError / ValueError of an argument that is not even of its type)."""
    code = getattr(reason, "code", "invalid_argument")
    message = str(reason) if isinstance(reason, (Error, TypeError, ValueError)) else \
        f"{type(reason).__name__}: {reason}"
    return code, message


@over_the_group
def _refuse(group, timeout, reason, call_site, call_number, backward=False):
    """Takes part in the group's call agreement as a rank that refuses the call for `reason`,
    then raises cpattn.Error with _refusal(reason)'s code and message: the other ranks raise
    rank_disagreement quoting it at once instead of waiting. Under the deadline `timeout`, or
    the default when the timeout is itself what is refused."""
    code, message = _refusal(reason)
    message = message.replace("\0", "\\0")  # C++ reads it as a C string: a NUL would cut it
    _cpattn.refuse(group, _deadline(timeout)[0], call_number, code, message, call_site,
                   backward)


@torch.library.custom_op("cpattn::refuse_call", mutates_args=(),
                         tags=(torch.Tag.nondeterministic_seeded,))
def refuse_call(q: torch.Tensor, v: torch.Tensor, group_name: str, timeout: float, code: str,
                message: str, call_site: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A call over the group named `group_name` that this rank refused while torch.compile
    traced it (the package's own argument checks, which dynamo runs at trace time): when the
    compiled code runs, it takes part in the group's call as a rank that refuses
    (refuse_grouped_call, as in eager) and raises cpattn.Error(code, message). Its outputs are
    never returned; q and v only shape them (out: q's shape with v's last dimension, as every
    layout the callers pass, BSHD, THD or SDPA's BHSD, has it; lse: [B, H, S] or [H, S]), so
    that the code after the call traces too; they are detached (nothing differentiates through
    the op), and any device's (the op only raises). `timeout`: NaN when the one given is not
    even a number."""
    refuse_grouped_call(process_group(group_name), timeout, error(code, message), call_site)
    raise AssertionError("refuse_grouped_call returned")  # it always raises


@refuse_call.register_fake
def _(q, v, group_name, timeout, code, message, call_site):
    if q.dim() == 0 or v.dim() == 0:
        return q.new_empty(0), q.new_empty(0, dtype=torch.float32)
    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    if q.dim() == 4:  # [B, S, H, D]: lse [B, H, S]
        return out, q.new_empty(q.shape[0], q.shape[2], q.shape[1], dtype=torch.float32)
    if q.dim() == 3:  # [S, H, D]: lse [H, S]
        return out, q.new_empty(q.shape[1], q.shape[0], dtype=torch.float32)
    return out, q.new_empty(0, dtype=torch.float32)


@torch.library.custom_op("cpattn::attention_forward", mutates_args=(), device_types="cpu")
def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rng: torch.Tensor,
                      call_number: torch.Tensor, doc_ids: Optional[torch.Tensor],
                      cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
                      sink: Optional[torch.Tensor], alibi_slopes: Optional[torch.Tensor],
                      slices: Optional[torch.Tensor], group_name: str, layout: str, seq_len: int,
                      kv_seq_len: int, softmax_scale: Optional[float], causal: bool,
                      window_left: int, window_right: int, dropout_p: float, softcap: float,
                      timeout: float, strategy: str, workspace_id: int, call_site: str,
                      max_seqlen_q: int, max_seqlen_k: int, for_backward: bool = True
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """cpattn's checked forward (attention_forward in C++) of this rank's q [B, S_r, Hq, Dqk],
    k [B, S_r, Hkv, Dqk], v [B, S_r, Hkv, Dv]. Returns out [B, S_r, Hq, Dv] (q's dtype, dense
    BSHD), lse float32 [B, Hq, S_r] and the call's fingerprint, uint8 [FINGERPRINT_BYTES].
    group_name "" runs on one rank. doc_ids (int64 [S]) or cu_seqlens_q and cu_seqlens_k (int64
    [D + 1], a varlen call: B = 1, positions and documents from flash-attn's cumulative lengths)
    are the whole sequence's documents. for_backward False (the functions below pass torch's grad
    mode: a no-grad forward has no backward) skips the digest of q, k and v that backward and
    recompute compare (CpOptions::for_backward), unless a cpattn.checkpoint records the call;
    its fingerprint then refuses every backward."""
    call = _call_of(call_number, q, k, doc_ids, cu_seqlens_q, cu_seqlens_k, sink, alibi_slopes,
                    slices, group_name, layout, seq_len, kv_seq_len, softmax_scale, causal,
                    window_left, window_right, dropout_p, softcap, timeout, strategy,
                    workspace_id, call_site, max_seqlen_q, max_seqlen_k, backward=False)
    record = active_record()
    with exchange_over(group_name):
        out, lse, fingerprint, inputs_digest = _cpattn.forward(
            call, call_number, q, k, v, rng, for_backward=for_backward or record is not None)
    if record is not None:
        seed, offset = (int(w) & _U64 for w in rng)
        record.on_call(seed, offset, inputs_digest, fingerprint)
    return out, lse, fingerprint


@attention_forward.register_fake
def _(q, k, v, rng, call_number, doc_ids, cu_seqlens_q, cu_seqlens_k, sink, alibi_slopes, slices,
      *call):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise error("shape_mismatch", "q, k and v must be 4-dimensional [B, S, H, D]")
    b, s, hq, _ = q.shape
    out = q.new_empty((b, s, hq, v.shape[3]))
    lse = q.new_empty((b, hq, s), dtype=torch.float32)
    fingerprint = q.new_empty((_cpattn.FINGERPRINT_BYTES,), dtype=torch.uint8)
    return out, lse, fingerprint


@torch.library.custom_op("cpattn::attention_backward", mutates_args=(), device_types="cpu")
def attention_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       out: torch.Tensor, lse: torch.Tensor, rng: torch.Tensor,
                       fingerprint: torch.Tensor, state_fingerprint: torch.Tensor,
                       call_number: torch.Tensor,
                       doc_ids: Optional[torch.Tensor], cu_seqlens_q: Optional[torch.Tensor],
                       cu_seqlens_k: Optional[torch.Tensor], sink: Optional[torch.Tensor],
                       alibi_slopes: Optional[torch.Tensor], slices: Optional[torch.Tensor],
                       group_name: str, layout: str, seq_len: int, kv_seq_len: int,
                       softmax_scale: Optional[float], causal: bool, window_left: int,
                       window_right: int, dropout_p: float, softcap: float, timeout: float,
                       strategy: str, workspace_id: int, call_site: str, max_seqlen_q: int,
                       max_seqlen_k: int
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """cpattn's checked backward (attention_backward in C++) of the forward whose fingerprint is
    `fingerprint`, from its state out, lse, rng (saved, maybe recomputed: they must be that
    forward's, and state_fingerprint, the fingerprint of the run that computed them, must equal
    `fingerprint`). Returns dq, dk, dv (dense, the dtype and shapes of q, k, v) and dsink
    (float32 [Hq], this rank's share of the sink gradient: the group's is the sum over its ranks;
    [0] without sinks)."""
    call = _call_of(call_number, q, k, doc_ids, cu_seqlens_q, cu_seqlens_k, sink, alibi_slopes,
                    slices, group_name, layout, seq_len, kv_seq_len, softmax_scale, causal,
                    window_left, window_right, dropout_p, softcap, timeout, strategy,
                    workspace_id, call_site, max_seqlen_q, max_seqlen_k, backward=True)
    with exchange_over(group_name):
        return tuple(_cpattn.backward(call, call_number, dout, q, k, v, out, lse, rng,
                                      fingerprint, state_fingerprint))


@attention_backward.register_fake
def _(dout, q, k, v, out, lse, rng, fingerprint, state_fingerprint, call_number, doc_ids,
      cu_seqlens_q, cu_seqlens_k, sink, *rest):
    dsink = sink.new_empty(sink.shape) if sink is not None else q.new_empty((0,),
                                                                              dtype=torch.float32)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dsink


def _setup_context(ctx, inputs, output):
    (q, k, v, rng, _call_number, doc_ids, cu_seqlens_q, cu_seqlens_k, sink, alibi_slopes, slices,
     *call, _for_backward) = inputs
    out, lse, fingerprint = output
    ctx.save_for_backward(q, k, v, out, lse, rng, fingerprint, doc_ids, cu_seqlens_q,
                          cu_seqlens_k, sink, alibi_slopes, slices)
    # The first forward's fingerprint also as an attribute: not a saved tensor, so a recompute
    # cannot replace it (the saved one becomes the recompute's).
    ctx.fingerprint = fingerprint
    ctx.call = call
    ctx.mark_non_differentiable(lse, fingerprint)


def _backward(ctx, dout, _dlse, _dfingerprint):
    (q, k, v, out, lse, rng, state_fingerprint, doc_ids, cu_seqlens_q, cu_seqlens_k, sink,
     alibi_slopes, slices) = ctx.saved_tensors
    call_number = take_call_number(q, ctx.call[0])
    dq, dk, dv, dsink = attention_backward(dout, q, k, v, out, lse, rng, ctx.fingerprint,
                                           state_fingerprint, call_number, doc_ids,
                                           cu_seqlens_q, cu_seqlens_k, sink, alibi_slopes, slices,
                                           *ctx.call)
    # Gradients of q, k, v, rng, call_number, doc_ids, cu_seqlens_q, cu_seqlens_k, sink,
    # alibi_slopes, slices, then <call> and for_backward.
    return (dq, dk, dv, None, None, None, None, None, dsink if sink is not None else None, None,
            None) + (None,) * (len(_CALL_ARGS) + 1)


torch.library.register_autograd("cpattn::attention_forward", _backward,
                                setup_context=_setup_context)


# ---------------------------------------------------------------------------------------------
# The functions users call.

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _caller_site():
    """"file.py:42" of the first frame outside the cpattn package: where the user made the call
    (inside cpattn.checkpoint, the checkpointed function's line), the default call site. Under
    torch.compile the frames are the tracer's: "compiled" (name calls with call_site=)."""
    if torch.compiler.is_compiling():
        return "compiled"
    frame = sys._getframe(1)
    while frame is not None and os.path.dirname(
            os.path.abspath(frame.f_code.co_filename)) == _PACKAGE_DIR:
        frame = frame.f_back
    if frame is None:
        return "cpattn"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _window(window_size):
    """(left, right) of a window_size pair of integers: operator.index refuses a float (a window
    of -0.5 or 2.9 is refused, not cut to 0 or 2) and a string."""
    try:
        left, right = (operator.index(w) for w in window_size)
    except (TypeError, ValueError):
        raise error("invalid_argument", f"window_size must be a pair of integers (left, right), "
                    f"got {window_size!r}") from None
    return left, right


def _rng_for(dropout_p, q, *others):
    """The RngState tensor of the call on q and the tensors `others` (its other tensor
    arguments, None for those not given): drawn by the op when there is dropout (no random
    numbers are consumed without)."""
    if dropout_p == 0.0:
        return torch.zeros(2, dtype=torch.int64)
    return draw_rng_state(q, [t for t in others if t is not None], dropout_p)


def check_doc_ids_type(doc_ids):
    """Raises cpattn.Error unless doc_ids is None or an int64 tensor (the op checks its
    length)."""
    if doc_ids is not None and (not isinstance(doc_ids, torch.Tensor) or
                                doc_ids.dtype != torch.int64):
        got = doc_ids.dtype if isinstance(doc_ids, torch.Tensor) else type(doc_ids).__name__
        raise error("invalid_argument", f"doc_ids must be an int64 tensor of the whole "
                    f"sequence, got {got}")


_SLICE_TYPES = {"full": 0, "causal": 1, "inv_causal": 2, "bi_causal": 3}


def _per_head(values, name, differentiable):
    """A per-head parameter (sink logits, ALiBi slopes) as a float32 tensor [Hq], or None. A
    tensor is used as given (a sink tensor that requires grad gets its gradient; ALiBi slopes,
    not differentiable, must not require one); a sequence of numbers becomes a tensor. Refuses
    an empty one (None is how to say "none")."""
    if values is None:
        return None
    if not isinstance(values, torch.Tensor):
        try:
            values = torch.tensor([float(x) for x in values], dtype=torch.float32)
        except (TypeError, ValueError):
            raise error("invalid_argument", f"{name} must be a float32 tensor [Hq] or a sequence "
                        f"of numbers, got {values!r}") from None
    if values.dtype != torch.float32 or values.dim() != 1:
        raise error("invalid_argument", f"{name} must be a 1-dimensional float32 tensor [Hq], got "
                    f"{values.dtype} with shape {list(values.shape)}")
    if values.numel() == 0:
        raise error("shape_mismatch", f"{name} has no values: one per query head, or None for "
                    f"no {name}")
    if values.requires_grad and not differentiable:
        raise error("invalid_argument", f"{name} gets no gradient from cpattn: pass a tensor that "
                    f"does not require grad (e.g. {name}.detach())")
    return values


def _slices_tensor(slices):
    """Mask slices as the int64 tensor [n, 5] the ops take, or None: from such a tensor, or from
    a sequence of (q_begin, q_end, k_begin, k_end, type) with type "full", "causal",
    "inv_causal", "bi_causal" (or 0..3)."""
    if slices is None:
        return None
    if isinstance(slices, torch.Tensor):
        if slices.dtype != torch.int64 or slices.dim() != 2 or slices.shape[1] != 5:
            raise error("invalid_argument", "slices must be an int64 tensor [n, 5] or a sequence "
                        "of (q_begin, q_end, k_begin, k_end, type)")
        return slices
    rows = []
    for n, s in enumerate(slices):
        try:
            qb, qe, kb, ke, kind = s
            code = _SLICE_TYPES[kind] if isinstance(kind, str) else operator.index(kind)
            # operator.index: integers only (a float bound such as 0.5 is refused, not cut).
            rows.append([operator.index(x) for x in (qb, qe, kb, ke)] + [code])
        except (TypeError, ValueError, KeyError):
            raise error("invalid_argument", f"slice {n} must be (q_begin, q_end, k_begin, k_end, "
                        f"type) with type one of {', '.join(_SLICE_TYPES)}, got {s!r}") from None
    return torch.tensor(rows, dtype=torch.int64).reshape(len(rows), 5)


def _autocast(q, k, v):
    """q, k, v in the CPU autocast dtype inside torch.autocast("cpu") (floating tensors but
    float64, which autocast leaves alone), as torch's scaled_dot_product_attention takes them
    there; as they are otherwise."""
    if not torch.is_autocast_enabled("cpu"):
        return q, k, v
    dtype = torch.get_autocast_dtype("cpu")
    return tuple(t.to(dtype) if t.is_floating_point() and t.dtype != torch.float64 else t
                 for t in (q, k, v))


def _refuse_forward_mode_ad(**tensors):
    """Refuses (cpattn.Error invalid_argument) a dual tensor of forward-mode AD (torch.func.jvp,
    jacfwd, torch.autograd.forward_ad): the ops have a backward formula only, and torch would
    drop the tangent, giving a silent zero."""
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and fwAD.unpack_dual(t).tangent is not None:
            raise error("invalid_argument", f"{name} carries a forward-mode AD tangent "
                        f"(torch.func.jvp, jacfwd, forward_ad): cpattn has no forward-mode "
                        f"derivative (use autograd's reverse mode: .backward() or "
                        f"torch.autograd.grad)")


def _check_on_the_cpu(**tensors):
    """Refuses (cpattn.Error invalid_argument) a tensor argument of a call over a group that is
    not on the CPU: on the meta device the op runs its shape-only implementation, which sends
    nothing, and the other ranks would wait for this one until their deadline."""
    for name, t in tensors.items():
        if t is not None and t.device.type != "cpu":
            raise error("invalid_argument", f"{name} is on {t.device}: a call over a group runs "
                        f"on CPU tensors")


def _apply(q, k, v, *, group, layout, seq_len, kv_seq_len, dropout_p, softmax_scale, causal,
           window_size, doc_ids, softcap, alibi_slopes, sink, slices, return_lse, timeout,
           strategy, workspace, call_site, cu_seqlens=(None, None), max_seqlen=(-1, -1)):
    """Runs the forward op (with its autograd) for a call whose Python-side arguments are
    checked here: a rank that fails these checks still joins the group's call agreement.
    cu_seqlens, max_seqlen: a varlen call's (cu_seqlens_q, cu_seqlens_k), int64 tensors, and
    (max_seqlen_q, max_seqlen_k), ints (the op checks them against each other)."""
    name = group_name_of(group)
    try:
        for arg, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor):
                raise error("invalid_argument", f"{arg} must be a torch.Tensor, got "
                            f"{type(t).__name__}")
        q, k, v = _autocast(q, k, v)
        _refuse_forward_mode_ad(q=q, k=k, v=v, sink=sink, alibi_slopes=alibi_slopes)
        if not isinstance(causal, bool):
            raise error("invalid_argument", f"causal must be a bool, got {causal!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise error("invalid_argument", f"timeout must be a number of seconds, got "
                        f"{timeout!r}")
        timeout = float(timeout)  # OverflowError past float's range: refused here
        left, right = _window(window_size)
        for arg, value in (("seq_len", seq_len), ("kv_seq_len", kv_seq_len),
                           ("window_size", left), ("window_size", right),
                           ("max_seqlen", max_seqlen[0]), ("max_seqlen", max_seqlen[1])):
            if not -2**63 <= value < 2**63:  # the op's int arguments are int64
                raise error("invalid_argument", f"{arg} {value} is outside int64")
        check_doc_ids_type(doc_ids)
        dropout_p = float(dropout_p)
        softcap = float(softcap)
        scale = None if softmax_scale is None else float(softmax_scale)
        alibi_slopes = _per_head(alibi_slopes, "alibi_slopes", differentiable=False)
        sink = _per_head(sink, "sink", differentiable=True)
        slices = _slices_tensor(slices)
        workspace_id = _workspace_id(workspace)
        if group is not None:
            # (cu_seqlens are on the CPU already: cu_seqlens_int64 copied them there.)
            _check_on_the_cpu(q=q, k=k, v=v, doc_ids=doc_ids, sink=sink,
                              alibi_slopes=alibi_slopes, slices=slices)
    except Exception as reason:  # whatever a bad argument raises: the rank still takes part
        if group is None:
            raise
        return refuse_grouped_call(group, timeout, reason, call_site, (q, v), return_lse)
    rng = _rng_for(dropout_p, q, k, v, doc_ids, *cu_seqlens, sink, alibi_slopes, slices)
    call_number = take_call_number(q, name)
    out, lse, _ = attention_forward(q, k, v, rng, call_number, doc_ids, cu_seqlens[0],
                                    cu_seqlens[1], sink, alibi_slopes, slices, name, str(layout),
                                    seq_len, kv_seq_len, scale, bool(causal), left, right,
                                    dropout_p, softcap, timeout, str(strategy),
                                    workspace_id, call_site, max_seqlen[0], max_seqlen[1],
                                    for_backward=torch.is_grad_enabled())
    return (out, lse) if return_lse else out


def attention(q, k, v, *, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
              doc_ids=None, softcap=0.0, alibi_slopes=None, sink=None, slices=None,
              return_lse=False, call_site=None):
    """Exact attention on one rank (the formulas of docs/design.md section 1).

    q [B, S, Hq, Dqk], k [B, Sk, Hkv, Dqk], v [B, Sk, Hkv, Dv]: float32, bfloat16 or float16
    CPU tensors of one dtype, any strides (BSHD views of BHSD memory included; no copies); out
    and the gradients come back in that dtype (fp32 accumulation, rounded once). Hq must be a
    multiple of Hkv (GQA/MQA). softmax_scale defaults to 1/sqrt(Dqk); window_size = (left,
    right) on positions, -1 for unbounded (flash-attn's convention); causal hides later keys;
    doc_ids, int64 [S], restricts attention to tokens of the same document (packed sequences).
    dropout_p drops attention probabilities with cpattn's counter-based dropout, its RngState
    drawn from torch's default CPU generator. Returns out [B, S, Hq, Dv] (dense BSHD), and with
    return_lse=True also lse float32 [B, Hq, S] (natural log; -inf for a row that sees no key;
    not differentiable). Differentiable in q, k and v; torch.compile traces it (the ops
    cpattn::attention_forward / _backward). Raises cpattn.Error naming what is wrong.
    call_site names the call in error messages (see ring_attention).

    Score features (docs/design.md section 1): softcap > 0 caps every scaled score at
    softcap * tanh(s / softcap) (Gemma 2); alibi_slopes, float32 [Hq] (or a list), subtracts
    slope_h * |i - j| on global positions (ALiBi); sink, float32 [Hq], adds exp(sink_h) once to
    every row's softmax denominator (gpt-oss attention sinks; differentiable: a sink tensor that
    requires grad gets this rank's share of its gradient: the group's is the sum over its ranks,
    which data-parallel gradient reduction over the group adds up); slices, a list of
    (q_begin, q_end, k_begin, k_end, type) on global positions with type "full", "causal"
    (bottom-right aligned), "inv_causal" or "bi_causal" (MagiAttention's AttnSlice), or an
    int64 tensor [n, 5] with type codes 0..3: a pair is visible only through one slice (slices
    must not overlap) and every other mask rule. With sinks, a row that sees no key has
    lse = sink_h."""
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise error("shape_mismatch", "q must be a 4-dimensional tensor [B, S, Hq, Dqk]")
    if not isinstance(k, torch.Tensor) or k.dim() != 4:
        raise error("shape_mismatch", "k must be a 4-dimensional tensor [B, Sk, Hkv, Dqk]")
    site = _caller_site() if call_site is None else str(call_site)
    return _apply(q, k, v, group=None, layout="contiguous", seq_len=q.shape[1],
                  kv_seq_len=k.shape[1], dropout_p=dropout_p, softmax_scale=softmax_scale,
                  causal=causal, window_size=window_size, doc_ids=doc_ids, softcap=softcap,
                  alibi_slopes=alibi_slopes, sink=sink, slices=slices, return_lse=return_lse,
                  timeout=DEFAULT_TIMEOUT_S, strategy="ring", workspace=None, call_site=site)


def ring_attention(q, k, v, *, group=None, layout="zigzag", dropout_p=0.0, softmax_scale=None,
                   causal=False, window_size=(-1, -1), doc_ids=None, softcap=0.0,
                   alibi_slopes=None, sink=None, slices=None, return_lse=False, seq_len=None,
                   timeout=DEFAULT_TIMEOUT_S, strategy=None, workspace=None, call_site=None):
    """Context-parallel attention over a torch.distributed process group: cpattn's C++ CP
    strategies, their messages sent with the group's send/recv (gloo on CPU).

    group: a ProcessGroup, a DeviceMesh (1-D; or 2-D with dims named "ring" and "ulysses" for
    the hybrid strategy, docs/pytorch.md), or None for the world group.

    strategy (docs/strategies.md; `cpattn plan` recommends one; default "ring", or a 2-D mesh's
    hybrid): "ring" (k/v blocks passed round
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
    ("zigzag", "striped" or "contiguous"; cpattn.shard cuts them). The result is exactly the
    attention of the whole sequence for this rank's queries: cp=N gives cp=1's numbers (to
    rounding) and bit-identical dropout masks, provided every rank is seeded alike
    (torch.manual_seed). doc_ids is int64 [S] for the WHOLE sequence. seq_len is the whole
    length S (default: len(doc_ids), which a seq_len given too must equal; else the sum of the
    ranks' local lengths; every call over a group sums them first, one small all-reduce inside
    the op, which also compares the call sites). Before any data moves, the ranks compare their
    calls (lengths, layouts, parameters, RngState, call numbers) and all raise cpattn.Error (code
    "rank_disagreement") naming what differs. Every wait has a deadline of `timeout` seconds: a
    rank that fails or stops makes the others raise cpattn.Error ("timeout" or "peer_failed")
    instead of hanging.

    call_site names where the call comes from (a layer index, a module path); by default it is
    the caller's "file.py:line" ("compiled" under torch.compile). The ranks compare it too, so
    a rank that skipped a call raises at the call that follows, on every rank, naming both
    sites (two identical calls from one site cannot be told apart: name them, e.g. by layer,
    when a loop makes them alike). Other arguments and results as attention()."""
    group, strategy = resolve_group(group, strategy)
    site = _caller_site() if call_site is None else str(call_site)
    try:  # before the length: a rank with doc_ids does not count tokens
        check_doc_ids_type(doc_ids)
        if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, int)
                                    or seq_len < 0):
            raise error("invalid_argument", f"seq_len must be None or a whole length >= 0, "
                        f"got {seq_len!r}")
        if seq_len is not None and doc_ids is not None and seq_len != doc_ids.numel():
            raise error("invalid_argument", f"seq_len {seq_len} contradicts doc_ids, which "
                        f"number {doc_ids.numel()} tokens (the whole sequence's documents)")
    except Exception as reason:
        return refuse_grouped_call(group, timeout, reason, site, (q, v), return_lse)
    if doc_ids is not None:
        total = doc_ids.numel()
    elif seq_len is not None:
        total = seq_len
    else:
        total = -1  # the op sums the ranks' local lengths
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        reason = error("shape_mismatch", "q must be a 4-dimensional tensor [B, S_r, Hq, Dqk]")
        return refuse_grouped_call(group, timeout, reason, site, (q, v), return_lse)
    return _apply(q, k, v, group=group, layout=layout, seq_len=total, kv_seq_len=-1,
                  dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                  window_size=window_size, doc_ids=doc_ids, softcap=softcap,
                  alibi_slopes=alibi_slopes, sink=sink, slices=slices, return_lse=return_lse,
                  timeout=timeout, strategy=strategy, workspace=workspace, call_site=site)


# ---------------------------------------------------------------------------------------------
# Varlen: packed documents in flash-attn's convention (cu_seqlens, thd tensors).

def cu_seqlens_int64(cu, name):
    """cu as an int64 CPU tensor; flash-attn passes int32."""
    if not isinstance(cu, torch.Tensor) or cu.dtype not in (torch.int32, torch.int64) or \
            cu.dim() != 1:
        got = f"{cu.dim()}-D {cu.dtype}" if isinstance(cu, torch.Tensor) else type(cu).__name__
        raise error("invalid_argument", f"{name} must be a 1-D int32 or int64 tensor of D + 1 "
                    f"cumulative document lengths, got {got}")
    return cu.to(device="cpu", dtype=torch.int64)


def _varlen_args(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """The arguments of a varlen call checked as far as Python can without reading tensor
    values (so torch.compile traces it): q, k, v as [1, total, H, D] views of the thd tensors,
    the cu_seqlens as int64 tensors, max_seqlen_q / max_seqlen_k whole numbers. The op checks
    the values in C++ (varlen.h: cu_seqlens start at 0, never decrease, end at the tensors'
    token counts, list as many documents for q as for k; each max_seqlen at least its longest
    document, as flash-attn sizes its grid by them)."""
    for name, x, shape in (("q", q, "[total_q, Hq, Dqk]"), ("k", k, "[total_k, Hkv, Dqk]"),
                           ("v", v, "[total_k, Hkv, Dv]")):
        if not isinstance(x, torch.Tensor) or x.dim() != 3:
            got = f"{x.dim()}-D" if isinstance(x, torch.Tensor) else type(x).__name__
            raise error("shape_mismatch", f"{name} must be a 3-dimensional thd tensor {shape}, "
                        f"got {got}")
    cu_q = cu_seqlens_int64(cu_seqlens_q, "cu_seqlens_q")
    cu_k = cu_seqlens_int64(cu_seqlens_k, "cu_seqlens_k")
    for name, given in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(given, bool) or not isinstance(given, int) or given < 0:
            raise error("invalid_argument", f"{name} must be a whole number (the longest "
                        f"document's length or more), got {given!r}")
    return q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), cu_q, cu_k


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                     dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                     softcap=0.0, alibi_slopes=None, sink=None, return_lse=False,
                     call_site=None):
    """Attention over packed variable-length documents on one rank, flash-attn 2.x's
    flash_attn_varlen_func: q [total_q, Hq, Dqk], k [total_k, Hkv, Dqk], v [total_k, Hkv, Dv]
    (thd, any strides), cu_seqlens_q / cu_seqlens_k int32 or int64 [D + 1] cumulative lengths
    (document d's queries are tokens cu_seqlens_q[d] .. cu_seqlens_q[d+1]-1, its keys
    cu_seqlens_k[d] .. cu_seqlens_k[d+1]-1; any lengths, 0 and 1 included, no padding),
    max_seqlen_q / max_seqlen_k ints at least the longest document's lengths. A document sees
    only itself; causal and window_size (left, right) are aligned bottom-right when its Lq !=
    Lk (key j visible to query i iff j <= i + Lk - Lq under causal), as in flash-attn. dropout
    as attention() (every document draws its own masks); softcap, alibi_slopes and sink as
    attention() (ALiBi on the varlen positions, so on |i - j| within a document under
    self-attention; a sink in every row's denominator). Returns out [total_q, Hq, Dv], and
    with return_lse=True also lse float32 [Hq, total_q] (flash-attn's softmax_lse layout).
    Differentiable in q, k and v; torch.compile traces it. Raises cpattn.Error naming a bad
    argument ("cu_seqlens_q ends at 300 but q has 301 tokens")."""
    site = _caller_site() if call_site is None else str(call_site)
    q4, k4, v4, cu_q, cu_k = _varlen_args(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                          max_seqlen_k)
    out, lse = _apply(q4, k4, v4, group=None, layout="contiguous", seq_len=q4.shape[1],
                      kv_seq_len=k4.shape[1], dropout_p=dropout_p, softmax_scale=softmax_scale,
                      causal=causal, window_size=window_size, doc_ids=None, softcap=softcap,
                      alibi_slopes=alibi_slopes, sink=sink, slices=None, return_lse=True,
                      timeout=DEFAULT_TIMEOUT_S, strategy="ring", workspace=None, call_site=site,
                      cu_seqlens=(cu_q, cu_k), max_seqlen=(max_seqlen_q, max_seqlen_k))
    out, lse = out.squeeze(0), lse.squeeze(0)
    return (out, lse) if return_lse else out


def varlen_ring_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                          group=None, layout="doc_zigzag", dropout_p=0.0, softmax_scale=None,
                          causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                          sink=None, return_lse=False, timeout=DEFAULT_TIMEOUT_S, strategy=None,
                          workspace=None, call_site=None):
    """varlen_attention over a context-parallel group (ring_attention's group, strategy,
    workspace, timeout and call agreement). q [S_q_r, Hq, Dqk], k and v [S_k_r, Hkv, D] are
    THIS rank's thd shards, in `layout` ("doc_zigzag" by default: every document balanced over
    the ranks; cut them with cpattn.shard(x, 0, layout=..., cu_seqlens=...)), while
    cu_seqlens_q / cu_seqlens_k and max_seqlen_q / max_seqlen_k describe the WHOLE sequence
    (every rank passes the same). The ranks' shards must hold cu_seqlens_q[-1] queries and
    cu_seqlens_k[-1] keys between them (counted in the op). Returns this rank's out
    [S_q_r, Hq, Dv] (and lse [Hq, S_q_r]): the rows of varlen_attention of the whole sequence,
    to rounding, with cp=1's dropout masks. Every rank raises alike on a bad argument of any
    rank."""
    group, strategy = resolve_group(group, strategy)
    site = _caller_site() if call_site is None else str(call_site)
    try:
        q4, k4, v4, cu_q, cu_k = _varlen_args(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                              max_seqlen_k)
    except Exception as reason:
        return refuse_grouped_call(group, timeout, reason, site, (q, v), return_lse)
    out, lse = _apply(q4, k4, v4, group=group, layout=layout, seq_len=-1, kv_seq_len=-1,
                      dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, doc_ids=None, softcap=softcap,
                      alibi_slopes=alibi_slopes, sink=sink, slices=None, return_lse=True,
                      timeout=timeout, strategy=strategy, workspace=workspace, call_site=site,
                      cu_seqlens=(cu_q, cu_k), max_seqlen=(max_seqlen_q, max_seqlen_k))
    out, lse = out.squeeze(0), lse.squeeze(0)
    return (out, lse) if return_lse else out
