"""cpattn.attention on one rank against PyTorch float64 math attention written in the test's
reference (tests/data/float64_attention.py: softmax(q k^T * scale + mask) v with the dropout
mask computed from the documented contract): out, lse and autograd gradients for full, causal,
window and document masks, GQA, Dqk != Dv, dropout, BSHD and strided (BHSD memory) inputs, sizes
1, 7, 97 and 1025.

Tolerance: each tensor's max |cpattn - float64| / max |float64| must stay below TOL (out, lse)
and GRAD_TOL (dq, dk, dv; relative to at least GRAD_FLOOR, so exactly-zero gradients, as for a
row that sees a single key, are held to an absolute 1e-6): fp32 accumulation gives ~1e-7 to
1e-6 at these sizes; a wrong mask element, tile or dropout bit gives ~1e-2."""

import pytest
import torch

import cpattn
from helpers import max_rel, reference_attention, rng_after_seed

TOL = 2e-5
GRAD_TOL = 1e-4
GRAD_FLOOR = 1e-2

CASES = [
    # (name, S, Hq, Hkv, Dqk, Dv, kwargs)
    ("full", 97, 2, 2, 64, 64, {}),
    ("causal", 97, 2, 2, 64, 64, {"causal": True}),
    ("window", 97, 2, 1, 32, 32, {"window_size": (13, 4)}),
    ("causal_window", 97, 2, 1, 32, 32, {"causal": True, "window_size": (20, -1)}),
    ("documents", 97, 2, 2, 32, 32, {"causal": True, "documents": [30, 1, 50, 16]}),
    ("gqa_8_2", 97, 8, 2, 64, 64, {"causal": True}),
    ("dqk_192_dv_128", 97, 2, 1, 192, 128, {"causal": True}),
    ("dropout", 97, 2, 2, 32, 32, {"dropout_p": 0.1}),
    ("dropout_causal_gqa", 97, 8, 2, 32, 16, {"causal": True, "dropout_p": 0.1}),
    ("dropout_documents", 97, 2, 1, 32, 32, {"dropout_p": 0.1, "documents": [40, 57]}),
    ("size_1", 1, 2, 1, 16, 16, {"causal": True}),
    ("size_7", 7, 2, 1, 16, 8, {"causal": True, "dropout_p": 0.1}),
    ("size_1025", 1025, 2, 1, 64, 64, {"causal": True, "dropout_p": 0.1}),
    ("size_1025_docs_window", 1025, 2, 2, 32, 32,
     {"window_size": (300, 10), "documents": [500, 1, 524]}),
]


def _doc_ids(lengths):
    return torch.cat([torch.full((n,), i, dtype=torch.int64) for i, n in enumerate(lengths)])


def _inputs(S, Hq, Hkv, Dqk, Dv, layout, seed=0):
    g = torch.Generator().manual_seed(seed)

    def make(h, d):
        if layout == "bshd":
            return torch.randn(1, S, h, d, generator=g)
        # BHSD memory seen as BSHD: a strided view, passed to cpattn without a copy.
        return torch.randn(1, h, S, d, generator=g).transpose(1, 2)

    return make(Hq, Dqk), make(Hkv, Dqk), make(Hkv, Dv), make(Hq, Dv)


@pytest.mark.parametrize("layout", ["bshd", "bhsd_strided"])
@pytest.mark.parametrize("name,S,Hq,Hkv,Dqk,Dv,kw", CASES, ids=[c[0] for c in CASES])
def test_matches_float64_reference(name, S, Hq, Hkv, Dqk, Dv, kw, layout):
    kw = dict(kw)
    docs = kw.pop("documents", None)
    doc_ids = None if docs is None else _doc_ids(docs)
    q, k, v, dout = _inputs(S, Hq, Hkv, Dqk, Dv, layout)
    if layout != "bshd" and S > 1:
        assert not q.is_contiguous()
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    rng = rng_after_seed(123) if kw.get("dropout_p", 0.0) > 0 else (0, 0)
    torch.manual_seed(123)
    out, lse = cpattn.attention(q, k, v, doc_ids=doc_ids, return_lse=True, **kw)
    out.backward(dout)
    ref_out, ref_lse, leaves = reference_attention(q, k, v, doc_ids=doc_ids, rng=rng, **kw)
    ref_out.backward(dout.double())
    assert out.shape == (1, S, Hq, Dv) and lse.shape == (1, Hq, S) and lse.dtype == torch.float32
    errors = {"out": max_rel(out.detach(), ref_out.detach()),
              "lse": max_rel(lse, ref_lse.detach())}
    for name_, got, leaf in (("dq", q.grad, leaves[0]), ("dk", k.grad, leaves[1]),
                             ("dv", v.grad, leaves[2])):
        assert got.shape == leaf.shape
        errors[name_] = max_rel(got, leaf.grad, GRAD_FLOOR)
    assert errors["out"] <= TOL and errors["lse"] <= TOL, errors
    assert max(errors["dq"], errors["dk"], errors["dv"]) <= GRAD_TOL, errors


def test_softmax_scale_and_empty_rows():
    # A causal window that hides every key from the first queries' perspective is impossible, so
    # use documents whose first token sees only itself and an explicit softmax scale.
    q, k, v, dout = _inputs(33, 2, 1, 16, 16, "bshd", seed=4)
    out, lse = cpattn.attention(q, k, v, softmax_scale=0.3, causal=True, return_lse=True,
                                doc_ids=_doc_ids([1, 32]))
    ref_out, ref_lse, _ = reference_attention(q, k, v, softmax_scale=0.3, causal=True,
                                              doc_ids=_doc_ids([1, 32]))
    assert max_rel(out, ref_out.detach()) <= TOL
    assert max_rel(lse, ref_lse.detach()) <= TOL


def test_dropout_is_repeatable_under_manual_seed_and_differs_across_seeds():
    q, k, v, _ = _inputs(64, 2, 2, 16, 16, "bshd", seed=5)
    torch.manual_seed(7)
    a = cpattn.attention(q, k, v, dropout_p=0.3)
    torch.manual_seed(7)
    b = cpattn.attention(q, k, v, dropout_p=0.3)
    torch.manual_seed(8)
    c = cpattn.attention(q, k, v, dropout_p=0.3)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_vmap_runs_each_sample_and_follows_its_randomness():
    """torch.func.vmap over cpattn.attention: each sample's out, and the gradients autograd takes
    through the mapped call, are those of a call on that sample alone. Dropout follows vmap's
    randomness as torch's dropout does: "error" (the default) raises torch's error, "same" gives
    every sample the masks of one draw (the draw an unmapped call makes after the same seed),
    "different" gives each sample its own masks (before, every mode gave "different")."""
    samples = [_inputs(33, 2, 1, 8, 8, "bshd", seed=s) for s in range(3)]
    q, k, v, dout = (torch.stack(t).requires_grad_() for t in zip(*samples))  # [3, 1, 33, H, 8]

    def mapped(p, randomness="error", inputs=(q, k, v)):
        return torch.func.vmap(lambda *t: cpattn.attention(*t, causal=True, dropout_p=p),
                               randomness=randomness)(*inputs)

    out = mapped(0.0)
    grads = torch.autograd.grad((out * dout).sum(), (q, k, v))
    for i, sample in enumerate(samples):
        qi, ki, vi = (t.clone().requires_grad_() for t in sample[:3])
        alone = cpattn.attention(qi, ki, vi, causal=True)
        assert torch.equal(out[i], alone)
        for got, want in zip(grads, torch.autograd.grad((alone * sample[3]).sum(), (qi, ki, vi))):
            assert torch.equal(got[i], want)

    one = tuple(t[:1].expand_as(t) for t in (q, k, v))  # sample 0, three times
    with pytest.raises(RuntimeError, match="randomness error mode"):
        mapped(0.3, inputs=one)
    torch.manual_seed(11)
    same = mapped(0.3, "same", one)
    torch.manual_seed(11)
    alone = cpattn.attention(q[0], k[0], v[0], causal=True, dropout_p=0.3)
    assert not torch.equal(alone, out[0])  # dropout did drop
    for i in range(3):
        assert torch.equal(same[i], alone)
    different = mapped(0.3, "different", one)
    assert not torch.equal(different[0], different[1])
    assert not torch.equal(different[1], different[2])
    # Mapped over k alone, or over the sinks alone (q shared by every sample): the same.
    for mapped_arg, arg in (("k", one[1]), ("sink", torch.zeros(3, 2))):
        def call(t, p=0.3):
            args = {"k": k[0], "sink": None, mapped_arg: t}
            return cpattn.attention(q[0], args["k"], v[0], dropout_p=p, sink=args["sink"])
        with pytest.raises(RuntimeError, match="randomness error mode"):
            torch.func.vmap(call)(arg)
        different = torch.func.vmap(call, randomness="different")(arg)
        assert not torch.equal(different[0], different[1]), mapped_arg
        same = torch.func.vmap(call, randomness="same")(arg)
        assert torch.equal(same[0], same[1]), mapped_arg


def test_lse_is_not_differentiable_and_out_is():
    q, k, v, _ = _inputs(9, 1, 1, 8, 8, "bshd")
    q.requires_grad_()
    out, lse = cpattn.attention(q, k, v, return_lse=True)
    assert out.requires_grad and not lse.requires_grad


# bfloat16 / float16 tensors (docs/design.md section 1.1): out and the gradients come back in the
# input dtype (lse float32), computed in fp32 from the 16-bit inputs and rounded once. Against
# float64 attention of the same (rounded) inputs: out within 2 units of the dtype's rounding of
# max |out| (the plain implementation's own rounding is 1), the gradients within the extra error
# of D = <dout, out> taken from the rounded out (docs/design.md), a few units of the dtype.
LOW_TOL = {torch.bfloat16: (2 * 2.0 ** -8, 8 * 2.0 ** -8),
           torch.float16: (2 * 2.0 ** -11, 8 * 2.0 ** -11)}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name,S,Hq,Hkv,Dqk,Dv,kw", [CASES[1], CASES[6], CASES[8], CASES[11]],
                         ids=[CASES[i][0] for i in (1, 6, 8, 11)])
def test_low_precision_matches_float64_reference(name, S, Hq, Hkv, Dqk, Dv, kw, dtype):
    kw = dict(kw)
    docs = kw.pop("documents", None)
    doc_ids = None if docs is None else _doc_ids(docs)
    q, k, v, dout = (t.to(dtype) for t in _inputs(S, Hq, Hkv, Dqk, Dv, "bhsd_strided", seed=3))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    rng = rng_after_seed(123) if kw.get("dropout_p", 0.0) > 0 else (0, 0)
    torch.manual_seed(123)
    out, lse = cpattn.attention(q, k, v, doc_ids=doc_ids, return_lse=True, **kw)
    out.backward(dout)
    assert out.dtype == dtype and lse.dtype == torch.float32
    assert q.grad.dtype == dtype and k.grad.dtype == dtype and v.grad.dtype == dtype
    ref_out, ref_lse, leaves = reference_attention(q, k, v, doc_ids=doc_ids, rng=rng, **kw)
    ref_out.backward(dout.double())
    out_tol, grad_tol = LOW_TOL[dtype]
    assert max_rel(out.detach().float(), ref_out.detach()) <= out_tol
    assert max_rel(lse, ref_lse.detach()) <= TOL
    for got, leaf in ((q.grad, leaves[0]), (k.grad, leaves[1]), (v.grad, leaves[2])):
        assert max_rel(got.float(), leaf.grad, GRAD_FLOOR) <= grad_tol, name


def test_mixed_dtypes_are_refused():
    q, k, v, _ = _inputs(9, 1, 1, 8, 8, "bshd")
    with pytest.raises(cpattn.Error, match="q, k and v must have one dtype, got q bf16, k fp32"):
        cpattn.attention(q.bfloat16(), k, v)
