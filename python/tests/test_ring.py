"""cpattn.ring_attention over 4 torch.distributed processes (gloo): cpattn's C++ CP strategies
(ring, allgather, ulysses, hybrid:2x2) with the group's send/recv. Results against one rank
(cpattn.attention) and the float64 reference, dropout masks bit-identical to cp=1 and to the
documented contract, shard/unshard round trips, and the cross-rank call agreement."""

import time

import numpy as np
import pytest
import torch

import cpattn
from helpers import max_rel, reference, reference_attention, rng_after_seed, run_processes

P = 4
STRATEGIES = ["ring", "allgather", "ulysses", "hybrid:2x2"]
CP_TOL = 1e-5   # ring vs one rank: fp32 partial results merged in another order
REF_TOL = 2e-5  # vs float64 (out, lse); gradients as in test_attention.py
GRAD_TOL, GRAD_FLOOR = 1e-4, 1e-2


def _problem(S, Hq, Hkv, Dqk, Dv, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, S, Hq, Dqk, generator=g), torch.randn(1, S, Hkv, Dqk, generator=g),
            torch.randn(1, S, Hkv, Dv, generator=g), torch.randn(1, S, Hq, Dv, generator=g))


def _ring_case(rank, world, S, Hq, Hkv, Dqk, Dv, layout, kw, docs, strategy):
    q, k, v, dout = _problem(S, Hq, Hkv, Dqk, Dv)
    doc_ids = None if docs is None else torch.tensor(docs, dtype=torch.int64)
    ql, kl, vl = (cpattn.shard(t, layout=layout).requires_grad_() for t in (q, k, v))
    torch.manual_seed(11)  # every rank alike: the same RngState
    out, lse = cpattn.ring_attention(ql, kl, vl, layout=layout, doc_ids=doc_ids, return_lse=True,
                                     timeout=60, strategy=strategy, **kw)
    out.backward(cpattn.shard(dout, layout=layout))
    whole = [cpattn.unshard(t.detach(), layout=layout) for t in (out, ql.grad, kl.grad, vl.grad)]
    lse_whole = cpattn.unshard(lse.transpose(1, 2), layout=layout).transpose(1, 2)
    return [t.numpy() for t in whole] + [lse_whole.contiguous().numpy()]


# Hq a multiple of P = 4, and Hkv dividing it or P, so that every strategy runs every case
# (Ulysses replicates the kv heads where Hkv < P).
CASES = [
    ("causal_zigzag_gqa_dropout", 97, 8, 2, 32, 32, "zigzag", {"causal": True, "dropout_p": 0.1},
     None),
    ("causal_striped_dqk_ne_dv", 97, 4, 1, 48, 16, "striped", {"causal": True}, None),
    ("window_contiguous", 97, 4, 4, 16, 16, "contiguous", {"window_size": (10, 3)}, None),
    ("documents_zigzag_dropout", 101, 4, 1, 16, 16, "zigzag", {"causal": True, "dropout_p": 0.1},
     [0] * 30 + [1] * 5 + [2] * 60 + [3] * 6),
    ("full_striped_dropout", 33, 4, 2, 16, 16, "striped", {"dropout_p": 0.1}, None),
    # Bidirectional documents on contiguous shards of 25 tokens: blocks 1-3 are needed by the rank
    # before them, the end of the ring's path, so they go straight from their home rank there.
    ("documents_contiguous_direct", 100, 4, 1, 16, 16, "contiguous", {"dropout_p": 0.1},
     [0] * 20 + [1] * 10 + [2] * 40 + [3] * 10 + [4] * 20),
]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name,S,Hq,Hkv,Dqk,Dv,layout,kw,docs", CASES, ids=[c[0] for c in CASES])
def test_ring_equals_one_rank_and_the_reference(name, S, Hq, Hkv, Dqk, Dv, layout, kw, docs,
                                                strategy):
    got = run_processes(P, _ring_case, S, Hq, Hkv, Dqk, Dv, layout, kw, docs, strategy)
    for r in range(1, P):  # every rank gathered the same whole tensors
        for a, b in zip(got[0], got[r]):
            assert np.array_equal(a, b)
    out, dq, dk, dv, lse = got[0]
    q, k, v, dout = _problem(S, Hq, Hkv, Dqk, Dv)
    doc_ids = None if docs is None else torch.tensor(docs, dtype=torch.int64)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    torch.manual_seed(11)
    one, one_lse = cpattn.attention(q, k, v, doc_ids=doc_ids, return_lse=True, **kw)
    one.backward(dout)
    assert max_rel(out, one.detach()) <= CP_TOL
    assert max_rel(lse, one_lse) <= CP_TOL
    for got_g, want in ((dq, q.grad), (dk, k.grad), (dv, v.grad)):
        assert max_rel(got_g, want, GRAD_FLOOR) <= CP_TOL * 10
    rng = rng_after_seed(11) if kw.get("dropout_p", 0) > 0 else (0, 0)
    ref_out, ref_lse, leaves = reference_attention(q, k, v, doc_ids=doc_ids, rng=rng, **kw)
    ref_out.backward(dout.double())
    assert max_rel(out, ref_out.detach()) <= REF_TOL
    assert max_rel(lse, ref_lse.detach()) <= REF_TOL
    for got_g, leaf in ((dq, leaves[0]), (dk, leaves[1]), (dv, leaves[2])):
        assert max_rel(got_g, leaf.grad, GRAD_FLOOR) <= GRAD_TOL


def _mask_case(rank, world, S, Hq, layout, strategy):
    # q = k = 0: every visible score is 0, so p_ij = 1/S; v_j = e_j (Dv = S) makes
    # out_i[j] = keep_ij / (1 - p) / S: the output spells out the dropout mask.
    q = torch.zeros(1, S, Hq, 4)
    k = torch.zeros(1, S, 1, 4)
    v = torch.eye(S).reshape(1, S, 1, S)
    torch.manual_seed(5)
    out = cpattn.ring_attention(cpattn.shard(q, layout=layout), cpattn.shard(k, layout=layout),
                                cpattn.shard(v, layout=layout), layout=layout, dropout_p=0.25,
                                strategy=strategy)
    return cpattn.unshard(out, layout=layout).numpy()


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("layout", ["zigzag", "striped"])
def test_dropout_masks_are_bit_identical_to_cp1_and_the_contract(layout, strategy):
    S, Hq = 37, 4
    kept = run_processes(P, _mask_case, S, Hq, layout, strategy)[0] != 0
    torch.manual_seed(5)
    one = cpattn.attention(torch.zeros(1, S, Hq, 4), torch.zeros(1, S, 1, 4),
                           torch.eye(S).reshape(1, S, 1, S), dropout_p=0.25).numpy() != 0
    assert np.array_equal(kept, one)
    seed, offset = rng_after_seed(5)
    b = 0
    h = np.arange(Hq)[None, :, None]
    i = np.arange(S)[:, None, None]
    j = np.arange(S)[None, None, :]
    want = reference.dropout_keep(reference.dropout_bits_arrays(seed, offset, b, h, Hq, i, j), 0.25)
    assert np.array_equal(kept[0], want)  # kept: [B, S, Hq, Dv = S]
    assert 0 < (~want).sum() < want.size  # some dropped, some kept: the test is not vacuous


def _shard_case(rank, world, S):
    x = torch.arange(S * 3, dtype=torch.float32).reshape(1, S, 3)
    pieces = {layout: cpattn.shard(x, layout=layout) for layout in ("zigzag", "striped",
                                                                      "contiguous")}
    back = {layout: bool(torch.equal(cpattn.unshard(p, layout=layout), x))
            for layout, p in pieces.items()}
    return back, {layout: p.shape[1] for layout, p in pieces.items()}


def test_shard_unshard_round_trip_uneven():
    results = run_processes(P, _shard_case, 10)
    for back, _ in results:
        assert all(back.values())
    # zigzag of 10 over 4 ranks: 8 chunks of 2,2,1,1,1,1,1,1 (the first 10 % 8 get the extra
    # token); rank r holds chunks r and 7 - r: 3, 3, 2, 2 tokens
    assert [lengths["zigzag"] for _, lengths in results] == [3, 3, 2, 2]


def _unshard_misuse(rank, world, bad):
    x = torch.arange(16 * 3, dtype=torch.float32).reshape(1, 16, 3)
    layout = "striped" if bad == "layouts" and rank == 1 else "zigzag"
    piece = cpattn.shard(x, layout=layout)
    docs = {}
    if bad == "sizes outside the sequence dim" and rank == 1:
        piece = piece[:, :, :2]
    elif bad == "not a tensor" and rank == 1:
        piece = piece.tolist()
    elif bad.startswith("documents"):  # 3 documents of 16 tokens, split in doc_zigzag
        layout = "doc_zigzag"
        cu = torch.tensor([0, 5, 9, 16])
        piece = cpattn.shard(x, layout=layout, cu_seqlens=cu)
        # The same documents as int32 on rank 1 (equal: not a disagreement), or as a list
        docs["cu_seqlens"] = cu if rank == 0 else \
            (cu.to(torch.int32) if bad == "documents as int32 and int64" else cu.tolist())
        if bad == "documents twice on one rank":
            docs["cu_seqlens"] = cu
            if rank == 0:
                docs["doc_ids"] = torch.tensor([0] * 5 + [1] * 4 + [2] * 7)
    start = time.monotonic()
    try:
        if bad == "a rank that never calls" and rank == 1:
            time.sleep(8)  # alive, past rank 0's deadline, but not in the call
        else:
            whole = cpattn.unshard(piece, layout=layout, timeout=5, **docs)
            assert torch.equal(whole, x), "unshard is not the whole tensor"
        return None, "", time.monotonic() - start
    except cpattn.Error as e:
        return e.code, str(e), time.monotonic() - start


@pytest.mark.parametrize("bad,codes,needles", [
    ("layouts", ("rank_disagreement",) * 2,
     ("unshard zigzag float32 [1,*,3]", "unshard striped float32 [1,*,3]")),
    ("sizes outside the sequence dim", ("rank_disagreement",) * 2,
     ("unshard zigzag float32 [1,*,3]", "unshard zigzag float32 [1,*,2]")),
    ("not a tensor", ("rank_disagreement", "invalid_argument"),
     ("unshard: x_local must be a tensor, got list",)),
    ("documents as int32 and int64", (None, None), ()),
    ("documents as a list", ("rank_disagreement", "invalid_argument"),
     ("cu_seqlens must be a 1-D int32 or int64 tensor of D + 1 cumulative document lengths, "
      "got list",)),
    ("documents twice on one rank", ("invalid_argument", "rank_disagreement"),
     ("pass doc_ids or cu_seqlens (the documents), not both",)),
])
def test_unshard_agrees_before_it_gathers(bad, codes, needles):
    """Pieces the ranks cannot put together alike (other layouts, other sizes): every rank
    raises at once, naming each rank's view, instead of a scrambled tensor or a gloo abort."""
    for rank, (code, message, seconds) in enumerate(run_processes(2, _unshard_misuse, bad)):
        assert code == codes[rank], (rank, code, message)
        for needle in needles:
            assert needle in message, (rank, needle, message)
        assert seconds < 3, (rank, seconds)


def test_unshard_waits_for_a_missing_rank_no_longer_than_its_deadline():
    (code, message, seconds), _ = run_processes(2, _unshard_misuse, "a rank that never calls")
    assert code == "timeout", message
    assert 4 < seconds < 20, seconds


def _disagree_case(rank, world, field):
    q = torch.randn(1, 8, 4, 8)
    torch.manual_seed(1)
    if field == "causal":
        cpattn.ring_attention(q, q, q, causal=(rank != 2), timeout=30)
    else:
        cpattn.ring_attention(q, q, q, strategy="allgather" if rank == 1 else "ring", timeout=30)


@pytest.mark.parametrize("field,sentence", [
    ("causal", "rank 2 has causal=false, ranks 0, 1, 3 have causal=true"),
    ("strategy", "rank 1 has strategy=allgather, ranks 0, 2, 3 have strategy=ring"),
])
def test_ranks_that_disagree_all_raise_naming_the_field(field, sentence):
    outcomes = run_processes(P, _disagree_case, field, expect_errors=True)
    for status, message in outcomes:
        assert status == "error"
        assert "rank_disagreement" in message or "call agreement failed" in message
        assert sentence in message


def _bad_strategy_case(rank, world):
    q = torch.randn(1, 8, 4, 8)
    errors = {}
    for strategy, dtype in (("hybrid:3x2", torch.float32), ("spiral", torch.float32),
                            ("ulysses", torch.bfloat16)):
        try:
            x = q.to(dtype)
            cpattn.ring_attention(x, x, x, strategy=strategy, timeout=30)
            errors[strategy] = None
        except cpattn.Error as e:
            errors[strategy] = (e.code, str(e))
    return errors


def test_strategies_that_cannot_run_are_refused_on_every_rank():
    for errors in run_processes(P, _bad_strategy_case):
        for strategy, got in errors.items():
            assert got is not None, f"{strategy} ran"
            assert got[0] == "invalid_argument", got
        assert "U * R = 4" in errors["hybrid:3x2"][1], errors
        assert "spiral" in errors["spiral"][1]
        assert "ring" in errors["ulysses"][1] and "bf16" in errors["ulysses"][1], errors


def _workspace_case(rank, world, strategy):
    q, k, v, dout = _problem(97, 8, 2, 32, 32)
    parts = [cpattn.shard(t) for t in (q, k, v, dout)]
    workspace = cpattn.Workspace()
    results, sizes = [], []
    for use in (None, workspace, workspace):  # without, then twice with the same workspace
        ql, kl, vl = (t.clone().requires_grad_() for t in parts[:3])
        torch.manual_seed(3)
        out = cpattn.ring_attention(ql, kl, vl, causal=True, dropout_p=0.1, timeout=60,
                                    strategy=strategy, workspace=use)
        out.backward(parts[3])
        results.append([t.detach().numpy().copy() for t in (out, ql.grad, kl.grad, vl.grad)])
        sizes.append(workspace.bytes)
    workspace.release()
    return results, sizes, workspace.bytes


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_workspace_gives_the_same_bits_and_keeps_its_buffers(strategy):
    for results, sizes, released in run_processes(P, _workspace_case, strategy):
        for with_workspace in results[1:]:
            for a, b in zip(with_workspace, results[0]):
                assert np.array_equal(a, b)
        assert sizes[0] == 0 and sizes[1] > 0, sizes  # filled by the first call that used it
        assert sizes[2] == sizes[1], "the second call reused the buffers"
        assert released == 0
