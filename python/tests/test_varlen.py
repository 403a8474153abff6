"""cpattn.varlen_attention (flash-attn 2.x's flash_attn_varlen_func convention: thd tensors,
cu_seqlens) on one rank and cpattn.varlen_ring_attention over 4 gloo processes on the
document-balanced layout: each document alone, bottom-right alignment when Lq != Lk, dropout,
GQA, int32 and int64 cu_seqlens, torch.compile and checkpointing, shard/unshard with documents,
and every bad argument refused with a clear error (on every rank under CP)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import cpattn
from helpers import max_rel, reference_attention, rng_after_seed, run_processes

P = 4
TOL = 1e-5
ISSUE = [1, 7, 300, 0, 5, 1025]


def _cu(lengths, dtype=torch.int32):
    return torch.tensor([0] + list(np.cumsum(lengths)), dtype=dtype)


def _thd(total_q, total_k, hq=4, hkv=2, dqk=16, dv=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(total_q, hq, dqk, generator=g), torch.randn(total_k, hkv, dqk, generator=g),
            torch.randn(total_k, hkv, dv, generator=g), torch.randn(total_q, hq, dv, generator=g))


def _per_document(q, k, v, dout, cu_q, cu_k, causal, window):
    """Each document on its own with torch's math SDPA in float64 and flash-attn's bottom-right
    mask built by hand (key j visible to query i iff j - (i + Lk - Lq) is within the window and
    <= 0 under causal): (out, dq, dk, dv), documents concatenated."""
    outs, dqs, dks, dvs = [], [], [], []
    g = q.shape[1] // k.shape[1]
    for d in range(len(cu_q) - 1):
        a, b, c, e = int(cu_q[d]), int(cu_q[d + 1]), int(cu_k[d]), int(cu_k[d + 1])
        lq, lk = b - a, e - c
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q[a:b], k[c:e], v[c:e]))
        i = torch.arange(lq).unsqueeze(1)
        j = torch.arange(lk).unsqueeze(0)
        rel = j - (i + lk - lq)
        mask = torch.ones(lq, lk, dtype=torch.bool)
        if causal:
            mask &= rel <= 0
        if window[0] >= 0:
            mask &= rel >= -window[0]
        if window[1] >= 0:
            mask &= rel <= window[1]
        scores = torch.einsum("ihd,jhd->hij", qd, kd.repeat_interleave(g, 1)) * qd.shape[-1] ** -0.5
        scores = scores.masked_fill(~mask, float("-inf"))
        p = torch.softmax(scores, -1).nan_to_num(0.0)  # a row without keys: out 0
        o = torch.einsum("hij,jhd->ihd", p, vd.repeat_interleave(g, 1))
        o.backward(dout[a:b].double())
        outs.append(o.detach())
        dqs.append(qd.grad)
        dks.append(kd.grad)
        dvs.append(vd.grad)
    return [torch.cat(x).float() for x in (outs, dqs, dks, dvs)]


CASES = [
    ("issue_causal", ISSUE, ISSUE, True, (-1, -1)),
    ("issue_full", ISSUE, ISSUE, False, (-1, -1)),
    ("issue_window", ISSUE, ISSUE, True, (40, -1)),
    ("cross_causal", [5, 0, 8, 1, 40, 3], [9, 2, 1, 0, 17, 3], True, (-1, -1)),
    ("cross_window", [5, 0, 8, 1, 40, 3], [9, 2, 1, 0, 17, 3], False, (3, 2)),
]


@pytest.mark.parametrize("name,lq,lk,causal,window", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("cu_dtype", [torch.int32, torch.int64])
def test_varlen_equals_each_document_alone(name, lq, lk, causal, window, cu_dtype):
    cu_q, cu_k = _cu(lq, cu_dtype), _cu(lk, cu_dtype)
    q, k, v, dout = _thd(int(cu_q[-1]), int(cu_k[-1]), seed=len(name))
    ql, kl, vl = (t.clone().requires_grad_() for t in (q, k, v))
    out, lse = cpattn.varlen_attention(ql, kl, vl, cu_q, cu_k, max(lq), max(lk), causal=causal,
                                       window_size=window, return_lse=True)
    assert out.shape == (int(cu_q[-1]), 4, 8) and lse.shape == (4, int(cu_q[-1]))
    out.backward(dout)
    want = _per_document(q, k, v, dout, cu_q, cu_k, causal, window)
    for got, exp in zip((out.detach(), ql.grad, kl.grad, vl.grad), want):
        assert max_rel(got, exp) < TOL


def test_varlen_dropout_matches_the_reference_with_the_varlen_positions():
    lengths = [3, 0, 40, 1, 17]
    cu = _cu(lengths)
    q, k, v, _ = _thd(int(cu[-1]), int(cu[-1]), hq=2, hkv=2)
    torch.manual_seed(5)
    out, lse = cpattn.varlen_attention(q, k, v, cu, cu, 40, 40, dropout_p=0.3, causal=True,
                                       return_lse=True)
    docs = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    want, want_lse, _ = reference_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                                            causal=True, doc_ids=docs, dropout_p=0.3,
                                            rng=rng_after_seed(5))
    assert max_rel(out, want.detach().squeeze(0)) < 2e-5
    assert max_rel(lse, want_lse.detach().squeeze(0)) < 2e-5


def test_varlen_under_compile_and_checkpoint():
    cu = _cu([4, 9, 0, 13])
    q, k, v, dout = _thd(26, 26)

    def f(q, k, v):
        return cpattn.varlen_attention(q, k, v, cu, cu, 13, 13, causal=True, dropout_p=0.2)

    grads = []
    for run in ("eager", "compiled", "checkpointed"):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        torch.manual_seed(9)
        if run == "compiled":
            out = torch.compile(f, backend="aot_eager", fullgraph=True)(*leaves)
        elif run == "checkpointed":
            out = torch.utils.checkpoint.checkpoint(f, *leaves, use_reentrant=False)
        else:
            out = f(*leaves)
        out.backward(dout)
        grads.append([out.detach()] + [t.grad for t in leaves])
    for other in grads[1:]:
        for a, b in zip(grads[0], other):
            assert torch.equal(a, b)


BAD = [
    ("not from 0", [1, 5, 9], [0, 4, 9], "cu_seqlens_q must start at 0, got 1"),
    ("decreasing", [0, 5, 9], [0, 6, 4, 9], "cu_seqlens_k must be non-decreasing"),
    ("not the tokens", [0, 5, 8], [0, 4, 8], "cu_seqlens_q ends at 8 but q has 9 tokens"),
    ("documents differ", [0, 5, 9], [0, 9], "cu_seqlens_q lists 2 documents but cu_seqlens_k 1"),
]


@pytest.mark.parametrize("what,cu_q,cu_k,says", BAD, ids=[b[0] for b in BAD])
def test_bad_cu_seqlens_are_refused_naming_them(what, cu_q, cu_k, says):
    q, k, v, _ = _thd(9, 9)
    with pytest.raises(cpattn.Error, match=says):
        cpattn.varlen_attention(q, k, v, torch.tensor(cu_q), torch.tensor(cu_k), 9, 9)


def test_other_bad_arguments_are_refused():
    cu = _cu([4, 5])
    q, k, v, _ = _thd(9, 9)
    with pytest.raises(cpattn.Error, match="max_seqlen_q is 4 but document 1 has 5 queries"):
        cpattn.varlen_attention(q, k, v, cu, cu, 4, 5)
    with pytest.raises(cpattn.Error, match="max_seqlen_k is 3 but document 0 has 4 keys"):
        cpattn.varlen_attention(q, k, v, cu, cu, 5, 3)
    with pytest.raises(cpattn.Error, match="max_seqlen_k must be a whole number"):
        cpattn.varlen_attention(q, k, v, cu, cu, 5, 2.5)
    with pytest.raises(cpattn.Error, match="cu_seqlens_q must be a 1-D int32 or int64 tensor"):
        cpattn.varlen_attention(q, k, v, cu.float(), cu, 5, 5)
    with pytest.raises(cpattn.Error, match="q must be a 3-dimensional thd tensor"):
        cpattn.varlen_attention(q.unsqueeze(0), k, v, cu, cu, 5, 5)


def test_shard_and_unshard_take_the_documents():
    lengths = [3, 0, 1, 25, 2, 2, 40]
    cu = _cu(lengths)
    docs = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    for p in (1, 3, 4):
        by_cu = [cpattn._cpattn.shard_token_indices("doc_zigzag", 73, p, r, cu_seqlens=cu)
                 for r in range(p)]
        by_ids = [cpattn._cpattn.shard_token_indices("doc_zigzag", 73, p, r, doc_ids=docs)
                  for r in range(p)]
        assert all(torch.equal(a, b) for a, b in zip(by_cu, by_ids))
        assert sorted(torch.cat(by_cu).tolist()) == list(range(73))
    plain = [cpattn._cpattn.shard_token_indices("doc_zigzag", 73, 4, r) for r in range(4)]
    zigzag = [cpattn._cpattn.shard_token_indices("zigzag", 73, 4, r) for r in range(4)]
    assert all(torch.equal(a, b) for a, b in zip(plain, zigzag))  # no documents: the zigzag


def _shard_refusals(rank, world):
    x = torch.randn(1, 16, 2, 4)
    cu = torch.tensor([0, 5, 9, 16])
    docs = torch.repeat_interleave(torch.arange(3), torch.tensor([5, 4, 7]))
    by_int32 = cpattn.shard(x, layout="doc_zigzag", cu_seqlens=cu.to(torch.int32))
    assert torch.equal(by_int32, cpattn.shard(x, layout="doc_zigzag", doc_ids=docs))
    with pytest.raises(cpattn.Error, match="doc_ids must be an int64 tensor of the whole "
                                           "sequence, got torch.int32") as e:
        cpattn.shard(x, layout="doc_zigzag", doc_ids=docs.to(torch.int32))
    assert e.value.code == "invalid_argument"
    with pytest.raises(cpattn.Error, match="not both"):
        cpattn.shard(x, layout="doc_zigzag", doc_ids=docs, cu_seqlens=cu)
    with pytest.raises(cpattn.Error, match="cu_seqlens must be a 1-D int32 or int64 tensor"):
        cpattn.shard(x, layout="doc_zigzag", cu_seqlens=cu.float())
    with pytest.raises(cpattn.Error, match=r"^cu_seqlens ends at 15 but the sequence has 16 "
                                           "tokens") as e:
        cpattn.shard(x, layout="doc_zigzag", cu_seqlens=torch.tensor([0, 5, 9, 15]))
    assert e.value.code == "shape_mismatch"
    with pytest.raises(cpattn.Error, match=r"^cu_seqlens must be non-decreasing, got 9 then 5"):
        cpattn.shard(x, layout="doc_zigzag", cu_seqlens=torch.tensor([0, 9, 5, 16]))


def test_shard_refuses_the_documents_attention_refuses():
    """shard checks the documents as attention does (one rule): int64 doc_ids, int32 or int64
    cu_seqlens, not both; errors name the argument shard was given."""
    run_processes(2, _shard_refusals)


def _cp_case(rank, world, lq, lk, causal, window, dropout_p, strategy, layout):
    cu_q, cu_k = _cu(lq), _cu(lk)
    q, k, v, dout = _thd(int(cu_q[-1]), int(cu_k[-1]), hq=8, hkv=2, seed=3)
    ql = cpattn.shard(q, 0, layout=layout, cu_seqlens=cu_q).requires_grad_()
    kl = cpattn.shard(k, 0, layout=layout, cu_seqlens=cu_k).requires_grad_()
    vl = cpattn.shard(v, 0, layout=layout, cu_seqlens=cu_k).requires_grad_()
    torch.manual_seed(21)
    out = cpattn.varlen_ring_attention(ql, kl, vl, cu_q, cu_k, max(lq), max(lk), causal=causal,
                                       window_size=window, dropout_p=dropout_p,
                                       strategy=strategy, layout=layout, timeout=60)
    out.backward(cpattn.shard(dout, 0, layout=layout, cu_seqlens=cu_q))
    whole = [cpattn.unshard(out.detach(), 0, layout=layout, cu_seqlens=cu_q)]
    whole += [cpattn.unshard(t.grad, 0, layout=layout, cu_seqlens=c)
              for t, c in ((ql, cu_q), (kl, cu_k), (vl, cu_k))]
    return [t.numpy() for t in whole]


def _one_rank(lq, lk, causal, window, dropout_p):
    cu_q, cu_k = _cu(lq), _cu(lk)
    q, k, v, dout = _thd(int(cu_q[-1]), int(cu_k[-1]), hq=8, hkv=2, seed=3)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(21)
    out = cpattn.varlen_attention(*leaves, cu_q, cu_k, max(lq), max(lk), causal=causal,
                                  window_size=window, dropout_p=dropout_p)
    out.backward(dout)
    return [out.detach()] + [t.grad for t in leaves]


CP_CASES = [
    ("issue_causal_dropout", ISSUE, ISSUE, True, (-1, -1), 0.1),
    ("issue_window", ISSUE, ISSUE, False, (30, 4), 0.0),
    ("cross_causal", [5, 0, 8, 1, 40, 3], [9, 2, 1, 0, 17, 3], True, (-1, -1), 0.0),
]


@pytest.mark.parametrize("strategy", ["ring", "allgather", "ulysses", "hybrid:2x2"])
@pytest.mark.parametrize("name,lq,lk,causal,window,dropout_p", CP_CASES,
                         ids=[c[0] for c in CP_CASES])
def test_varlen_ring_attention_equals_one_rank(name, lq, lk, causal, window, dropout_p,
                                               strategy):
    got = run_processes(P, _cp_case, lq, lk, causal, window, dropout_p, strategy, "doc_zigzag")
    want = _one_rank(lq, lk, causal, window, dropout_p)
    for rank_result in got:  # every rank gathered the same whole tensors
        for g, w in zip(rank_result, want):
            assert max_rel(torch.from_numpy(g), w) < TOL


def _cp_bad(rank, world):
    cu = _cu([40, 3, 60])
    q, k, v, _ = _thd(103, 103)
    ql, kl, vl = (cpattn.shard(t, 0, layout="doc_zigzag", cu_seqlens=cu) for t in (q, k, v))
    mine = cu.clone()
    if rank == 2:
        mine[1] = 50  # not non-decreasing any more
    try:
        cpattn.varlen_ring_attention(ql, kl, vl, mine, mine, 60, 60, timeout=60)
    except cpattn.Error as e:
        return e.code, str(e)
    return "none", ""


def test_a_rank_with_bad_cu_seqlens_fails_every_rank():
    got = run_processes(P, _cp_bad)
    assert got[2][0] == "invalid_argument" and "non-decreasing" in got[2][1]
    for r in (0, 1, 3):
        assert got[r][0] == "rank_disagreement", got[r]
        assert "rank 2 refuses the call" in got[r][1] and "non-decreasing" in got[r][1]


def _cp_layout_disagreement(rank, world):
    cu = _cu([40, 3, 60])
    layout = "zigzag" if rank == 1 else "doc_zigzag"
    q, k, v, _ = _thd(103, 103)
    ql, kl, vl = (cpattn.shard(t, 0, layout=layout, cu_seqlens=cu) for t in (q, k, v))
    try:
        cpattn.varlen_ring_attention(ql, kl, vl, cu, cu, 60, 60, layout=layout, timeout=60)
    except cpattn.Error as e:
        return e.code, str(e)
    return "none", ""


def test_ranks_that_disagree_on_the_layout_raise():
    for code, message in run_processes(P, _cp_layout_disagreement):
        assert code == "rank_disagreement" and "layout" in message, message


def _context_with_document_layout(rank, world):
    ids = torch.zeros(1, 8, dtype=torch.int64)
    try:
        with cpattn.context_parallel(None if world == 1 else torch.distributed.group.WORLD,
                                     buffers=[ids], seq_dims=[1], layout="doc_zigzag"):
            F.scaled_dot_product_attention(torch.zeros(1, 1, 8, 4), torch.zeros(1, 1, 8, 4),
                                           torch.zeros(1, 1, 8, 4))
    except cpattn.Error as e:
        return e.code, str(e)
    return "none", ""


def test_context_parallel_refuses_the_document_layout():
    # It shards its buffers before any SDPA call names the documents.
    for code, message in [_context_with_document_layout(0, 1)] + \
            run_processes(2, _context_with_document_layout):
        assert code == "invalid_argument" and "doc_zigzag" in message, message
