"""cpattn's torch.library ops: torch.library.opcheck (schema, fake tensors, autograd registration,
AOT dispatch) for the forward and backward of attention and ring_attention, on one rank, on a
ProcessGroup of one, and on 2 gloo processes; the state-carrying ops' contracts."""

import pytest
import torch

import cpattn
from helpers import run_processes

# opcheck's tests; test_aot_dispatch_dynamic compiles the op with AOTAutograd (dynamic shapes)
# and compares outputs and gradients with eager, bitwise for the integer fingerprint.
_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor",
          "test_aot_dispatch_dynamic")


def _inputs(b=2, s=7, hq=4, hkv=2, dqk=8, dv=6, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, s, hq, dqk, generator=g, dtype=dtype).requires_grad_()
    k = torch.randn(b, s, hkv, dqk, generator=g, dtype=dtype).requires_grad_()
    v = torch.randn(b, s, hkv, dv, generator=g, dtype=dtype).requires_grad_()
    return q, k, v


def _call(group_name, seq_len, *, causal=True, dropout_p=0.0, layout="contiguous",
          strategy="ring", softcap=0.0):
    # The non-tensor arguments (cpattn/_ops.py: _CALL_ARGS order).
    return (group_name, layout, seq_len, -1, None, causal, -1, -1, dropout_p, softcap, 60.0,
            strategy, 0, "test", -1, -1)


# The document tensors after call_number: doc_ids, cu_seqlens_q, cu_seqlens_k.
_NO_DOCS = (None, None, None)
# The optional tensor arguments after them (_PARAM_TENSORS): sink, alibi_slopes, slices.
_NO_PARAMS = (None, None, None)


def _opcheck_both(q, k, v, call, rng, params=_NO_PARAMS, docs=_NO_DOCS):
    """opcheck of attention_forward, then of attention_backward on the forward's real state."""
    number = torch.zeros(1, dtype=torch.int64)
    forward_args = (q, k, v, rng, number) + docs + params + call
    torch.library.opcheck(torch.ops.cpattn.attention_forward.default, forward_args,
                          test_utils=_UTILS)
    out, lse, fingerprint = torch.ops.cpattn.attention_forward(*forward_args)
    dout = torch.randn_like(out)
    detached = tuple(t.detach() if t is not None else None for t in params)
    backward_args = ((dout, q.detach(), k.detach(), v.detach(), out.detach(), lse, rng,
                     fingerprint, fingerprint, torch.ones(1, dtype=torch.int64)) + docs + detached
                     + call)
    torch.library.opcheck(torch.ops.cpattn.attention_backward.default, backward_args,
                          test_utils=("test_schema", "test_faketensor",
                                      "test_aot_dispatch_dynamic"))


@pytest.mark.parametrize("dropout_p", [0.0, 0.25])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck_one_rank(dropout_p, dtype):
    q, k, v = _inputs(dtype=dtype)
    rng = torch.tensor([123, -5], dtype=torch.int64) if dropout_p else torch.zeros(2, dtype=torch.int64)
    _opcheck_both(q, k, v, _call("", q.shape[1], dropout_p=dropout_p), rng)


def test_opcheck_one_rank_with_sinks_softcap_alibi_and_slices():
    q, k, v = _inputs()
    sink = torch.tensor([0.5, -1.0, 0.25, 2.0]).requires_grad_()
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])
    slices = torch.tensor([[0, 7, 0, 3, 0], [3, 7, 3, 7, 1]], dtype=torch.int64)
    rng = torch.tensor([11, 3], dtype=torch.int64)
    _opcheck_both(q, k, v, _call("", q.shape[1], causal=False, dropout_p=0.2, softcap=2.0), rng,
                  (sink, slopes, slices))


def _varlen_call(group_name, seq_len, layout="contiguous", dropout_p=0.0):
    # A varlen call: cu_seqlens in the tensors, max_seqlen (10) at the end of the call args.
    return _call(group_name, seq_len, dropout_p=dropout_p, layout=layout)[:-2] + (10, 10)


_CU = torch.tensor([0, 3, 3, 13], dtype=torch.int64)  # documents of 3, 0 and 10 tokens


def test_opcheck_varlen_one_rank():
    q, k, v = _inputs(b=1, s=13)
    rng = torch.tensor([5, 6], dtype=torch.int64)
    _opcheck_both(q, k, v, _varlen_call("", 13, dropout_p=0.25), rng, docs=(None, _CU, _CU))


def _opcheck_varlen_group(rank, world):
    import torch.distributed as dist
    group = dist.group.WORLD
    local = len(cpattn._cpattn.shard_token_indices("doc_zigzag", 13, world, rank,
                                                    cu_seqlens=_CU))
    q, k, v = _inputs(b=1, s=local, seed=rank)
    _opcheck_both(q, k, v, _varlen_call(group.group_name, -1, "doc_zigzag", 0.1),
                  torch.tensor([7, 9], dtype=torch.int64), docs=(None, _CU, _CU))
    return True


def test_opcheck_varlen_two_gloo_processes():
    assert run_processes(2, _opcheck_varlen_group, start="forkserver") == [True, True]


def _opcheck_group(rank, world, layout, strategy):
    import torch.distributed as dist
    group = dist.group.WORLD
    seq_len = 13  # shards of uneven lengths
    local = len(cpattn._cpattn.shard_token_indices(layout, seq_len, world, rank))
    q, k, v = _inputs(s=local, seed=rank)
    rng = torch.tensor([7, 9], dtype=torch.int64)
    _opcheck_both(q, k, v, _call(group.group_name, seq_len, dropout_p=0.1, layout=layout,
                                 strategy=strategy), rng)
    return True


def test_opcheck_process_group_of_one():
    assert run_processes(1, _opcheck_group, "contiguous", "ring", start="forkserver") == [True]


@pytest.mark.parametrize("layout,strategy", [("zigzag", "ring"), ("contiguous", "ring"),
                                             ("zigzag", "allgather")])
def test_opcheck_two_gloo_processes(layout, strategy):
    assert run_processes(2, _opcheck_group, layout, strategy, start="forkserver") == [True, True]


def test_fake_forward_gives_the_real_shapes_dtypes_and_strides():
    q, k, v = _inputs(b=1, s=9, hq=6, hkv=3, dqk=4, dv=5, dtype=torch.bfloat16)
    args = (q, k, v, torch.zeros(2, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)) + \
        _NO_DOCS + _NO_PARAMS + _call("", 9)
    real = torch.ops.cpattn.attention_forward(*args)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fake = torch.ops.cpattn.attention_forward(*(mode.from_tensor(a) if isinstance(
            a, torch.Tensor) else a for a in args))
    for r, f in zip(real, fake):
        assert (r.shape, r.dtype, r.stride()) == (f.shape, f.dtype, f.stride())
    assert real[2].numel() == cpattn._cpattn.FINGERPRINT_BYTES


def test_the_rng_state_op_draws_from_torchs_generator_only_with_dropout():
    x = torch.empty(0)
    torch.manual_seed(3)
    a = torch.ops.cpattn.draw_rng_state(x, [], 0.1)
    b = torch.ops.cpattn.draw_rng_state(x, [], 0.1)
    torch.manual_seed(3)
    assert torch.equal(torch.ops.cpattn.draw_rng_state(x, [], 0.1), a)
    assert not torch.equal(a, b)
    before = torch.get_rng_state()
    zeros = torch.zeros(2, dtype=torch.int64)
    assert torch.equal(torch.ops.cpattn.draw_rng_state(x, [x], 0.0), zeros)
    assert torch.equal(torch.get_rng_state(), before)
    for op in (torch.ops.cpattn.draw_rng_state.default,
               torch.ops.cpattn.take_call_number.default):
        assert torch.Tag.nondeterministic_seeded in op.tags


def test_a_fingerprint_of_another_call_is_refused_by_backward():
    q, k, v = _inputs()
    call = _call("", q.shape[1])
    zeros = torch.zeros(2, dtype=torch.int64)
    number = torch.zeros(1, dtype=torch.int64)
    out, lse, fp = torch.ops.cpattn.attention_forward(q, k, v, zeros, number, *_NO_DOCS,
                                                      *_NO_PARAMS, *call)
    q2 = q.detach() + 1
    _, _, other_fp = torch.ops.cpattn.attention_forward(q2, k, v, zeros, number, *_NO_DOCS,
                                                        *_NO_PARAMS, *call)
    dout = torch.ones_like(out)
    with pytest.raises(cpattn.Error, match="q/k/v|digest|inputs"):
        torch.ops.cpattn.attention_backward(dout, q.detach(), k.detach(), v.detach(), out, lse,
                                            zeros, other_fp, other_fp, number, *_NO_DOCS,
                                            *_NO_PARAMS, *call)
    # out/lse computed by another call than the forward whose fingerprint autograd kept.
    with pytest.raises(cpattn.Error, match="recompute diverged: .*q/k/v inputs digest") as refused:
        torch.ops.cpattn.attention_backward(dout, q.detach(), k.detach(), v.detach(), out, lse,
                                            zeros, fp, other_fp, number, *_NO_DOCS, *_NO_PARAMS,
                                            *call)
    assert refused.value.code == "recompute_diverged"
    for first, state in ((fp[:-1], fp), (fp, fp[:-1])):
        with pytest.raises(cpattn.Error, match="fingerprint"):
            torch.ops.cpattn.attention_backward(dout, q.detach(), k.detach(), v.detach(), out,
                                                lse, zeros, first, state, number, *_NO_DOCS,
                                                *_NO_PARAMS, *call)


def test_a_forward_not_for_backward_gives_the_same_bits_and_no_backward_takes_its_state():
    q, k, v = _inputs()
    call = _call("", q.shape[1], dropout_p=0.25)
    rng = torch.tensor([5, 3], dtype=torch.int64)
    number = torch.zeros(1, dtype=torch.int64)
    args = (q.detach(), k.detach(), v.detach(), rng, number) + _NO_DOCS + _NO_PARAMS + call
    out, lse, fp = torch.ops.cpattn.attention_forward(*args)
    out_ng, lse_ng, fp_ng = torch.ops.cpattn.attention_forward(*args, for_backward=False)
    assert torch.equal(out, out_ng) and torch.equal(lse, lse_ng)
    dout = torch.ones_like(out)
    with pytest.raises(cpattn.Error, match="CpOptions::for_backward = false") as refused:
        torch.ops.cpattn.attention_backward(dout, *args[:3], out_ng, lse_ng, rng, fp_ng, fp_ng,
                                            number, *_NO_DOCS, *_NO_PARAMS, *call)
    assert refused.value.code == "state_mismatch"


def test_the_functions_skip_the_inputs_digest_only_where_no_backward_or_recompute_can_follow(
        monkeypatch):
    # cpattn.attention passes torch's grad mode; a cpattn.checkpoint's record (whose first
    # forward runs under no_grad with use_reentrant=True) needs the digest anyway.
    seen = []
    real = cpattn._ops._cpattn.forward

    def spy(*args, for_backward):
        seen.append(for_backward)
        return real(*args, for_backward=for_backward)

    monkeypatch.setattr(cpattn._ops._cpattn, "forward", spy)
    q, k, v = _inputs()
    cpattn.attention(q, k, v, causal=True)
    with torch.no_grad():
        cpattn.attention(q, k, v, causal=True)
    assert seen == [True, False]
    seen.clear()
    x = torch.randn(2, 7, 4, 8, requires_grad=True)

    def block(x):
        return cpattn.attention(x, x[:, :, :2], x[:, :, :2], causal=True, dropout_p=0.5)

    cpattn.checkpoint(block, x, use_reentrant=True).sum().backward()
    assert seen == [True, True]  # the no-grad first forward, then the recompute
    assert x.grad is not None


def test_lse_and_fingerprint_are_not_differentiable():
    q, k, v = _inputs()
    out, lse = cpattn.attention(q, k, v, causal=True, return_lse=True)
    assert out.requires_grad and not lse.requires_grad
