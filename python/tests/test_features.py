"""Attention sinks, logit softcap, ALiBi and mask slices from PyTorch (docs/design.md section 1):
cpattn.attention against the float64 reference of tests/data/float64_attention.py (each formula
written from the math, gradients by autograd, the sink's included), alone and combined with
windows, documents and dropout, fp32 and bf16; cpattn.ring_attention over 4 gloo processes with
every strategy against one rank (each rank's sink.grad its own share, summed over the group as
every parameter's gradient is); torch.compile and activation
checkpointing bitwise equal to eager; bad arguments refused, on every rank of a group.

Tolerances as in test_attention.py: out and lse within TOL of the float64 answer relative to
its largest magnitude, gradients (dsink included) within GRAD_TOL relative to at least
GRAD_FLOOR."""

import numpy as np
import pytest
import torch

import cpattn
from helpers import max_rel, reference_attention, rng_after_seed, run_processes

TOL = 2e-5
GRAD_TOL = 1e-4
GRAD_FLOOR = 1e-2
P = 4
STRATEGIES = ["ring", "allgather", "ulysses", "hybrid:2x2"]

PREFIX_LM = [(0, 97, 0, 30, "full"), (30, 97, 30, 97, "causal")]
RANDOM_TYPES = [(0, 40, 0, 60, "inv_causal"), (40, 97, 0, 20, "full"), (40, 97, 20, 97, "causal"),
                (0, 40, 60, 97, "bi_causal")]

FEATURES = [
    # (name, Hq, Hkv, kwargs; "sink" / "alibi" become per-head tensors)
    ("sink", 4, 2, {"sink": True}),
    ("softcap", 4, 2, {"softcap": 2.0, "causal": True}),
    ("alibi", 4, 1, {"alibi": True, "causal": True}),
    ("prefix_lm_slices", 4, 2, {"slices": PREFIX_LM}),
    ("random_type_slices", 4, 4, {"slices": RANDOM_TYPES, "sink": True}),
    ("everything", 8, 2, {"sink": True, "softcap": 3.0, "alibi": True, "window_size": (40, 3),
                          "documents": [30, 1, 66], "dropout_p": 0.1}),
    ("slices_sink_dropout", 4, 2, {"slices": PREFIX_LM, "sink": True, "dropout_p": 0.1}),
]


def _problem(S, Hq, Hkv, D, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q, k, v, dout = (torch.randn(1, S, h, D, generator=g).to(dtype) for h in (Hq, Hkv, Hkv, Hq))
    return q, k, v, dout


def _kwargs(kw, Hq, seed=0):
    """cpattn's keyword arguments for a FEATURES entry: sink logits and ALiBi slopes as tensors,
    documents as doc_ids."""
    kw = dict(kw)
    g = torch.Generator().manual_seed(100 + seed)
    if kw.pop("sink", False):
        kw["sink"] = (2.0 * torch.randn(Hq, generator=g)).requires_grad_()
    if kw.pop("alibi", False):
        kw["alibi_slopes"] = torch.tensor([2.0 ** (-8.0 * (h + 1) / Hq) for h in range(Hq)])
    docs = kw.pop("documents", None)
    if docs is not None:
        kw["doc_ids"] = torch.cat([torch.full((n,), i, dtype=torch.int64)
                                   for i, n in enumerate(docs)])
    return kw


@pytest.mark.parametrize("name,Hq,Hkv,kw", FEATURES, ids=[f[0] for f in FEATURES])
def test_one_rank_matches_the_float64_reference(name, Hq, Hkv, kw):
    S = 97
    q, k, v, dout = _problem(S, Hq, Hkv, 32)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    kw = _kwargs(kw, Hq)
    rng = rng_after_seed(5) if kw.get("dropout_p", 0.0) > 0 else (0, 0)
    torch.manual_seed(5)
    out, lse = cpattn.attention(q, k, v, return_lse=True, **kw)
    out.backward(dout)
    ref_out, ref_lse, leaves = reference_attention(q, k, v, rng=rng, **kw)
    ref_out.backward(dout.double())
    assert max_rel(out.detach(), ref_out.detach()) <= TOL
    assert max_rel(lse, ref_lse.detach()) <= TOL
    grads = [(q.grad, leaves[0]), (k.grad, leaves[1]), (v.grad, leaves[2])]
    if "sink" in kw:
        assert kw["sink"].grad is not None and kw["sink"].grad.shape == (Hq,)
        grads.append((kw["sink"].grad, leaves[3]))
    for got, leaf in grads:
        assert max_rel(got, leaf.grad, GRAD_FLOOR) <= GRAD_TOL


def test_bf16_with_every_feature():
    q, k, v, dout = _problem(97, 8, 2, 32, dtype=torch.bfloat16)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    kw = _kwargs(FEATURES[5][3], 8)
    torch.manual_seed(5)
    out = cpattn.attention(q, k, v, **kw)
    out.backward(dout)
    assert out.dtype == torch.bfloat16 and kw["sink"].grad.dtype == torch.float32
    rng = rng_after_seed(5)
    ref_out, _, leaves = reference_attention(q, k, v, rng=rng, **kw)
    ref_out.backward(dout.double())
    assert max_rel(out.detach().float(), ref_out.detach()) <= 2 * 2.0 ** -8 * 4
    assert max_rel(kw["sink"].grad, leaves[3].grad, GRAD_FLOOR) <= 8 * 2.0 ** -8


def test_a_row_that_sees_no_key_has_the_sink_as_lse():
    q, k, v, _ = _problem(9, 2, 1, 8)
    sink = torch.tensor([0.5, -1.25])
    # Slices that show queries 0..3 nothing.
    out, lse = cpattn.attention(q, k, v, sink=sink, slices=[(4, 9, 0, 9, "full")],
                                return_lse=True)
    assert torch.equal(lse[0, :, :4], sink[:, None].expand(2, 4))
    assert torch.count_nonzero(out[0, :4]) == 0


def _ring_features(rank, world, name, Hq, Hkv, kw, layout):
    """Every strategy's gathered out, dq, dk, dv and this rank's dsink share, one after the other
    in one group (each launch costs a group's start-up)."""
    S = 97
    q, k, v, dout = _problem(S, Hq, Hkv, 16)
    results = []
    for strategy in STRATEGIES:
        kws = _kwargs(kw, Hq)
        ql, kl, vl = (cpattn.shard(t, layout=layout).requires_grad_() for t in (q, k, v))
        torch.manual_seed(11)
        out = cpattn.ring_attention(ql, kl, vl, layout=layout, strategy=strategy, timeout=60,
                                    **kws)
        out.backward(cpattn.shard(dout, layout=layout))
        whole = [cpattn.unshard(t.detach(), layout=layout)
                 for t in (out, ql.grad, kl.grad, vl.grad)]
        dsink = kws["sink"].grad.numpy() if "sink" in kws else np.zeros(0)
        results.append([t.numpy() for t in whole] + [dsink])
    return results


@pytest.mark.parametrize("name,Hq,Hkv,kw", [FEATURES[4], FEATURES[5], FEATURES[6]],
                         ids=[FEATURES[i][0] for i in (4, 5, 6)])
def test_every_strategy_equals_one_rank(name, Hq, Hkv, kw):
    by_rank = run_processes(P, _ring_features, name, Hq, Hkv, kw, "zigzag", start="forkserver")
    q, k, v, dout = _problem(97, Hq, Hkv, 16)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    kws = _kwargs(kw, Hq)
    torch.manual_seed(11)
    one = cpattn.attention(q, k, v, **kws)
    one.backward(dout)
    for s, strategy in enumerate(STRATEGIES):
        got = [r[s] for r in by_rank]
        for r in range(1, P):  # every rank gathered the same whole tensors
            for a, b in zip(got[0][:4], got[r][:4]):
                assert np.array_equal(a, b), strategy
        out, dq, dk, dv, _ = got[0]
        assert max_rel(out, one.detach()) <= 1e-5, strategy
        for got_g, want in ((dq, q.grad), (dk, k.grad), (dv, v.grad)):
            assert max_rel(got_g, want, GRAD_FLOOR) <= 1e-4, strategy
        if "sink" in kws:
            # Each rank's sink.grad is its own share, as for every other parameter of a model
            # under CP: the loop sums them over the group.
            dsink = sum(g[4].astype(np.float64) for g in got)
            assert max_rel(dsink, kws["sink"].grad, GRAD_FLOOR) <= 1e-4, strategy
            assert not all(np.array_equal(g[4], got[0][4]) for g in got), strategy


class _Block(torch.nn.Module):
    """A transformer block whose attention has learnable sinks, a softcap and ALiBi. (No biases
    and no mean in the loss: inductor sums those reductions in another order than eager, which
    test_compile.py avoids too; cpattn's ops are opaque nodes and give the same bits.)"""

    def __init__(self, e=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(e, 3 * e, bias=False)
        self.proj = torch.nn.Linear(e, e, bias=False)
        self.sink = torch.nn.Parameter(torch.linspace(-1.0, 1.0, heads))
        self.register_buffer("slopes", torch.tensor([2.0 ** -(h + 1) for h in range(heads)]))

    def forward(self, x):
        b, s, e = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, e // self.heads).unbind(2)
        a = cpattn.attention(q, k, v, causal=True, dropout_p=0.1, sink=self.sink, softcap=4.0,
                             alibi_slopes=self.slopes, call_site="block")
        return x + self.proj(a.reshape(b, s, e))


def _step(model, x, checkpointed):
    model.zero_grad()
    torch.manual_seed(3)
    if checkpointed:
        y = torch.utils.checkpoint.checkpoint(model, x, use_reentrant=False)
    else:
        y = model(x)
    (y * torch.arange(y.numel(), dtype=y.dtype).view_as(y).sin()).sum().backward()
    return [y.detach()] + [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("checkpointed", [False, True])
def test_compiled_with_learnable_sinks_is_bitwise_eager(checkpointed):
    torch.manual_seed(0)
    model = _Block()
    x = torch.randn(2, 40, 32)
    eager = _step(model, x, checkpointed)
    compiled = torch.compile(model, fullgraph=True)
    got = _step(compiled, x, checkpointed)
    for a, b in zip(got, eager):
        assert torch.equal(a, b)
    assert model.sink.grad is not None and torch.count_nonzero(model.sink.grad) > 0


def test_bad_arguments_are_refused():
    q, k, v, _ = _problem(16, 4, 2, 8)
    with pytest.raises(cpattn.Error, match="must not overlap"):
        cpattn.attention(q, k, v, slices=[(0, 16, 0, 16, "causal"), (0, 16, 0, 16, "bi_causal")])
    with pytest.raises(cpattn.Error, match="alibi_slopes must have one value per query head"):
        cpattn.attention(q, k, v, alibi_slopes=[0.5, 0.25])
    with pytest.raises(cpattn.Error, match="sink must be a 1-dimensional float32"):
        cpattn.attention(q, k, v, sink=torch.zeros(4, dtype=torch.float64))
    with pytest.raises(cpattn.Error, match="slice 0 must be"):
        cpattn.attention(q, k, v, slices=[(0, 16, 0, 16, "diagonal")])
    for cap in (-1.0, 1e-30, 1e30):  # negative; outside [2^-60, 2^60]
        with pytest.raises(cpattn.Error, match=r"softcap must be 0 \(off\) or in \[2\^-60"):
            cpattn.attention(q, k, v, softcap=cap)
    with pytest.raises(cpattn.Error, match="alibi_slopes.1. must be within"):
        cpattn.attention(q, k, v, alibi_slopes=[0.5, -3e38, 0.25, 0.125])
    # Values float32 cannot hold would turn a feature off or overflow: refused, not rounded.
    with pytest.raises(cpattn.Error, match="softcap = 1e-50 is not representable in float32"):
        cpattn.attention(q, k, v, softcap=1e-50)
    with pytest.raises(cpattn.Error, match="dropout_p = 1e-50 is not representable"):
        cpattn.attention(q, k, v, dropout_p=1e-50)
    with pytest.raises(cpattn.Error, match="softmax_scale = 1e.300 is not representable"):
        cpattn.attention(q, k, v, softmax_scale=1e300)
    with pytest.raises(cpattn.Error, match="sink has no values: one per query head, or None"):
        cpattn.attention(q, k, v, sink=torch.zeros(0))
    with pytest.raises(cpattn.Error, match="alibi_slopes gets no gradient"):
        cpattn.attention(q, k, v, alibi_slopes=torch.full((4,), 0.5, requires_grad=True))
    with pytest.raises(cpattn.Error, match="slice 0 must be"):
        cpattn.attention(q, k, v, slices=[(0, 16.5, 0, 16, "full")])


def _one_rank_differs(rank, world, what):
    q, k, v, _ = _problem(16, 4, 2, 8)
    kw = {}
    if rank == 1:
        kw = {"sink": dict(sink=torch.zeros(4)), "softcap": dict(softcap=2.0),
              "alibi": dict(alibi_slopes=[0.5] * 4),
              "slices": dict(slices=[(0, 16, 0, 16, "causal")])}[what]
    try:
        cpattn.ring_attention(cpattn.shard(q), cpattn.shard(k), cpattn.shard(v), timeout=30,
                              **kw)
    except cpattn.Error as e:
        return e.code, str(e)
    return "ok", ""


@pytest.mark.parametrize("what,label", [("sink", "sink digest"), ("softcap", "softcap"),
                                        ("alibi", "alibi_slopes digest"),
                                        ("slices", "slices digest")])
def test_ranks_that_differ_all_raise_naming_the_field(what, label):
    got = run_processes(2, _one_rank_differs, what, start="forkserver")
    for code, message in got:
        assert code == "rank_disagreement" and label in message, message
