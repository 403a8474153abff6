"""cpattn.sdpa (torch.nn.functional.scaled_dot_product_attention's signature on cpattn) against
torch's own SDPA, and cpattn.context_parallel as a drop-in: an unmodified model that calls
F.scaled_dot_product_attention, with attention dropout and torch.utils.checkpoint, gives on 2
and 4 gloo processes the loss and gradients of one process; a group of one or None gives the
one-process run; misuse raises cpattn.Error on every rank within the deadline."""

import re
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
import torch.utils.checkpoint

import cpattn
from helpers import max_rel, run_processes

# cpattn.sdpa vs torch's SDPA in fp32: two fp32 computations in other orders. Bounds are
# relative to max(max |torch|, 1): absolute where a gradient is zero up to rounding (S = 1:
# softmax of one key is exactly 1, dq = dk = 0, both give ~1e-7 noise).
FP32_TOL = 1e-5
FLOOR = 1.0
# bf16 in, bf16 out (cpattn accumulates in fp32 and rounds once; torch's CPU kernel too):
# against float64 SDPA of the same bf16 values, two bf16 roundings (2^-8 each) and some; against
# torch's bf16 SDPA, both errors.
BF16_REF_TOL = 1e-2
BF16_TORCH_TOL = 2e-2
# The drop-in model on P ranks vs one process: fp32 partial results merged in another order,
# through 2 layers and all-reduced gradients.
CP_TOL = 1e-5
DEADLINE_S = 10.0  # the context's timeout in the misuse tests
NEVER_DEADLINE_S = 5.0  # the test that waits for the deadline has a shorter one
AT_ONCE_S = 3.0    # "at once": far below the deadline (a rank that waited for it took 10 s)


# ---------------------------------------------------------------------------------------------
# 1. cpattn.sdpa equals torch's scaled_dot_product_attention.

def _bhsd(B, H, S, D, dtype, g, strided):
    """A [B, H, S, D] tensor: contiguous, or (strided) the BHSD view of BSHD memory that a model
    makes with .view(B, S, H, D).transpose(1, 2)."""
    if strided:
        return torch.randn(B, S, H, D, generator=g).to(dtype).transpose(1, 2)
    return torch.randn(B, H, S, D, generator=g).to(dtype)


def _sdpa_problem(B, Hq, Hkv, Sq, Sk, D, Dv, dtype=torch.float32, strided=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (_bhsd(B, Hq, Sq, D, dtype, g, strided), _bhsd(B, Hkv, Sk, D, dtype, g, strided),
            _bhsd(B, Hkv, Sk, Dv, dtype, g, strided), _bhsd(B, Hq, Sq, Dv, dtype, g, False))


def _out_and_grads(fn, q, k, v, dout, dtype=None, **kw):
    """fn(q, k, v, **kw) and its gradients w.r.t. q, k, v for the cotangent dout (inputs cast to
    dtype first when given)."""
    leaves = [(t if dtype is None else t.to(dtype)).detach().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves, **kw)
    grads = torch.autograd.grad(out, leaves, dout if dtype is None else dout.to(dtype))
    return [out.detach()] + list(grads)


SDPA_CASES = [
    # name, B, Hq, Hkv, Sq, Sk, D, Dv, is_causal, scale, strided
    ("causal_S7", 2, 4, 4, 7, 7, 8, 8, True, None, False),
    ("full_S7_strided", 2, 4, 4, 7, 7, 8, 8, False, None, True),
    ("causal_S97_gqa_scale", 1, 8, 2, 97, 97, 16, 16, True, 0.3, False),
    ("full_S97_gqa_strided", 1, 4, 2, 97, 97, 16, 16, False, None, True),
    ("causal_S1", 2, 2, 2, 1, 1, 8, 8, True, None, False),
    ("full_S1_mqa_scale", 1, 4, 1, 1, 1, 8, 8, False, 0.5, False),
    ("full_dv_ne_d_mqa", 1, 4, 1, 33, 33, 16, 12, False, None, True),
    # Sq != Sk: SDPA's is_causal is top-left (query i sees keys j <= i), as the docstring says.
    ("causal_sq_lt_sk", 1, 2, 2, 5, 9, 8, 8, True, None, False),
    ("causal_sq_gt_sk", 1, 2, 2, 9, 5, 8, 8, True, None, False),
]


@pytest.mark.parametrize("name,B,Hq,Hkv,Sq,Sk,D,Dv,causal,scale,strided", SDPA_CASES,
                         ids=[c[0] for c in SDPA_CASES])
def test_sdpa_equals_torch_sdpa_fp32(name, B, Hq, Hkv, Sq, Sk, D, Dv, causal, scale, strided):
    q, k, v, dout = _sdpa_problem(B, Hq, Hkv, Sq, Sk, D, Dv, strided=strided)
    kw = dict(is_causal=causal, scale=scale, enable_gqa=Hq != Hkv)
    got = _out_and_grads(cpattn.sdpa, q, k, v, dout, **kw)
    want = _out_and_grads(F.scaled_dot_product_attention, q, k, v, dout, **kw)
    assert got[0].shape == want[0].shape == (B, Hq, Sq, Dv)
    for what, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        assert a.dtype == torch.float32
        assert max_rel(a, b, FLOOR) <= FP32_TOL, (what, max_rel(a, b, FLOOR))


BF16_CASES = [
    ("causal_S97_gqa", 2, 4, 2, 97, 16, True, None),
    ("full_S7_scale", 2, 2, 2, 7, 16, False, 0.2),
    ("causal_S1", 2, 2, 1, 1, 16, True, None),
]


@pytest.mark.parametrize("name,B,Hq,Hkv,S,D,causal,scale", BF16_CASES,
                         ids=[c[0] for c in BF16_CASES])
def test_sdpa_bf16_is_near_torch_and_the_float64_reference(name, B, Hq, Hkv, S, D, causal,
                                                           scale):
    q, k, v, dout = _sdpa_problem(B, Hq, Hkv, S, S, D, D, dtype=torch.bfloat16)
    kw = dict(is_causal=causal, scale=scale, enable_gqa=Hq != Hkv)
    got = _out_and_grads(cpattn.sdpa, q, k, v, dout, **kw)
    torch_bf16 = _out_and_grads(F.scaled_dot_product_attention, q, k, v, dout, **kw)
    ref = _out_and_grads(F.scaled_dot_product_attention, q, k, v, dout, dtype=torch.float64, **kw)
    for what, a, t, r in zip(("out", "dq", "dk", "dv"), got, torch_bf16, ref):
        assert a.dtype == torch.bfloat16
        a = a.float()
        assert max_rel(a, r, FLOOR) <= BF16_REF_TOL, (what, max_rel(a, r, FLOOR))
        assert max_rel(a, t.float(), FLOOR) <= BF16_TORCH_TOL, (what, max_rel(a, t.float(), FLOOR))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sdpa_under_autocast_runs_in_the_autocast_dtype_as_torch(dtype):
    """Inside torch.autocast("cpu") torch's SDPA casts q, k and v to the autocast dtype, also
    when they come in different dtypes (a model whose RoPE made q and k fp32, v bf16): so does
    cpattn, and the gradients reach the fp32 leaves in fp32."""
    q, k, v, dout = _sdpa_problem(1, 4, 2, 97, 97, 16, 16)
    v = v.to(dtype)  # mixed input dtypes, as autocast models make them
    kw = dict(is_causal=True, enable_gqa=True)
    with torch.autocast("cpu", dtype=dtype):
        got = _out_and_grads(cpattn.sdpa, q, k, v, dout.to(dtype), **kw)
        want = _out_and_grads(F.scaled_dot_product_attention, q, k, v, dout.to(dtype), **kw)
    ref = _out_and_grads(F.scaled_dot_product_attention, q.to(dtype), k.to(dtype), v,
                         dout.to(dtype), dtype=torch.float64, **kw)
    for what, a, t, r in zip(("out", "dq", "dk", "dv"), got, want, ref):
        assert a.dtype == t.dtype, (what, a.dtype, t.dtype)  # out: dtype; grads: the leaves'
        assert max_rel(a.double(), r, FLOOR) <= BF16_REF_TOL, (what, max_rel(a.double(), r, FLOOR))
    assert got[0].dtype == dtype and got[1].dtype == torch.float32


def test_sdpa_dropout_is_cpattns_dropout_repeatable_from_the_seed():
    # dropout_p is cpattn.attention's dropout on the BSHD views: bitwise the same numbers from
    # the same seed, other masks from another seed.
    q, k, v, _ = _sdpa_problem(1, 4, 2, 33, 33, 8, 8)
    torch.manual_seed(7)
    a = cpattn.sdpa(q, k, v, dropout_p=0.25, is_causal=True, enable_gqa=True)
    torch.manual_seed(7)
    b = cpattn.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                         dropout_p=0.25, causal=True).transpose(1, 2)
    torch.manual_seed(8)
    c = cpattn.sdpa(q, k, v, dropout_p=0.25, is_causal=True, enable_gqa=True)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize("mask", ["bool", "float", "all_true"])
def test_sdpa_refuses_a_dense_attn_mask(mask):
    q, k, v, _ = _sdpa_problem(1, 2, 2, 7, 7, 8, 8)
    m = {"bool": torch.rand(7, 7) > 0.3, "float": torch.randn(7, 7),
         "all_true": torch.ones(7, 7, dtype=torch.bool)}[mask]
    F.scaled_dot_product_attention(q, k, v, attn_mask=m)  # torch takes it: the refusal is ours
    with pytest.raises(cpattn.Error, match="attn_mask is not supported by cpattn") as info:
        cpattn.sdpa(q, k, v, attn_mask=m)
    assert info.value.code == "invalid_argument"


def test_gqa_without_enable_gqa_is_refused_as_torch_refuses_it():
    q, k, v, _ = _sdpa_problem(1, 4, 2, 7, 7, 8, 8)
    with pytest.raises(RuntimeError):  # torch: "The size of tensor a (4) must match ..."
        F.scaled_dot_product_attention(q, k, v)
    with pytest.raises(cpattn.Error, match="query has 4 heads, key 2: pass enable_gqa=True") \
            as info:
        cpattn.sdpa(q, k, v)
    assert isinstance(info.value, RuntimeError) and info.value.code == "shape_mismatch"
    # Hq not a multiple of Hkv: neither runs it, enable_gqa or not.
    q3 = torch.randn(1, 3, 7, 8)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q3, k, v, enable_gqa=True)
    with pytest.raises(cpattn.Error, match="Hq must be a multiple of Hkv"):
        cpattn.sdpa(q3, k, v, enable_gqa=True)


# ---------------------------------------------------------------------------------------------
# 2, 3. The drop-in: a model that knows nothing of cpattn.

VOCAB, MAX_POS, D_MODEL, HEADS, KV_HEADS, HEAD_DIM = 61, 64, 32, 4, 2, 8
BATCH, SEQ = 2, 29  # 29 tokens: uneven zigzag chunks on 2 and 4 ranks
IGNORE = -100
MODEL_SEED, DATA_SEED, STEP_SEED = 0, 1, 2


class Block(torch.nn.Module):
    """Pre-norm attention (F.scaled_dot_product_attention on BHSD, causal, GQA, attention
    dropout while training) and MLP."""

    def __init__(self, dropout_p):
        super().__init__()
        self.dropout_p = dropout_p
        self.norm1 = torch.nn.LayerNorm(D_MODEL)
        self.wq = torch.nn.Linear(D_MODEL, HEADS * HEAD_DIM, bias=False)
        self.wk = torch.nn.Linear(D_MODEL, KV_HEADS * HEAD_DIM, bias=False)
        self.wv = torch.nn.Linear(D_MODEL, KV_HEADS * HEAD_DIM, bias=False)
        self.wo = torch.nn.Linear(HEADS * HEAD_DIM, D_MODEL, bias=False)
        self.norm2 = torch.nn.LayerNorm(D_MODEL)
        self.w1 = torch.nn.Linear(D_MODEL, 2 * D_MODEL)
        self.w2 = torch.nn.Linear(2 * D_MODEL, D_MODEL)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.norm1(x)
        q = self.wq(h).view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.wk(h).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.wv(h).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout_p if self.training
                                           else 0.0, is_causal=True, enable_gqa=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, s, HEADS * HEAD_DIM))
        return x + self.w2(F.gelu(self.w1(self.norm2(x))))


class TinyLM(torch.nn.Module):
    """Token and learned position embeddings, blocks checkpointed by torch.utils.checkpoint
    (use_reentrant=False, or True), a head; forward returns the sum of the per-token
    cross-entropy losses over the labels that are not IGNORE."""

    def __init__(self, dropout_p, layers=2, reentrant=False):
        super().__init__()
        self.reentrant = reentrant
        torch.manual_seed(MODEL_SEED)
        self.tok = torch.nn.Embedding(VOCAB, D_MODEL)
        self.pos = torch.nn.Embedding(MAX_POS, D_MODEL)
        self.blocks = torch.nn.ModuleList(Block(dropout_p) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(D_MODEL)
        self.head = torch.nn.Linear(D_MODEL, VOCAB)

    def forward(self, input_ids, position_ids, labels):
        x = self.tok(input_ids) + self.pos(position_ids)
        for block in self.blocks:
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=self.reentrant)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE,
                               reduction="sum")


def _batch():
    """(input_ids, position_ids, labels) [BATCH, SEQ] of the whole sequence; some labels are
    IGNORE, so the ranks hold different numbers of targets."""
    g = torch.Generator().manual_seed(DATA_SEED)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    ids, labels = tokens[:, :-1].clone(), tokens[:, 1:].clone()
    labels[torch.rand(BATCH, SEQ, generator=g) < 0.2] = IGNORE
    pos = torch.arange(SEQ).expand(BATCH, SEQ).clone()
    return ids, pos, labels


def _step(model, ids, pos, labels, group, context=True, seed=STEP_SEED, inside=None):
    """Forward + backward of the mean token loss from `seed`: inside
    context_parallel(group, [ids, pos, labels]) or (context=False) without one. Returns (this
    rank's share of the loss, {name: gradient}). `inside(ids, pos, labels)` runs in the
    context, before the forward."""
    targets = int((labels != IGNORE).sum())  # of the whole batch
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    if context:
        with cpattn.context_parallel(group, buffers=[ids, pos, labels], seq_dims=[1, 1, 1],
                                     timeout=120):
            if inside is not None:
                inside(ids, pos, labels)
            loss = model(ids, pos, labels) / targets
            loss.backward()
    else:
        loss = model(ids, pos, labels) / targets
        loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _buffers_state(tensors):
    return [(t.data_ptr(), tuple(t.shape), t.clone()) for t in tensors]


def _restored(tensors, before):
    """Whether each tensor object holds its whole value again: the same storage, shape and
    data as before the context."""
    return [t.data_ptr() == ptr and tuple(t.shape) == shape and torch.equal(t, value)
            for t, (ptr, shape, value) in zip(tensors, before)]


def _drop_in(rank, world):
    """{(dropout_p, reentrant): this rank's results} of the model's step under
    context_parallel over the world group, for dropout 0 and 0.1 (and 0.1 with reentrant
    checkpointing): the loss and gradients all-reduced, and whether every buffer was this
    rank's shard inside and its whole self again after."""
    runs = {}
    for dropout_p, reentrant in ((0.0, False), (0.1, False), (0.1, True)):
        model = TinyLM(dropout_p, reentrant=reentrant)
        ids, pos, labels = _batch()
        before = _buffers_state([ids, pos, labels])
        sharded = []

        def inside(*buffers):  # every buffer is this rank's zigzag shard of its whole tensor
            sharded.extend(torch.equal(b, cpattn.shard(whole, dim=1)) and b.shape[1] < SEQ
                           for b, (_, _, whole) in zip(buffers, before))

        loss, grads = _step(model, ids, pos, labels, dist.group.WORLD, inside=inside)
        dist.all_reduce(loss)
        for g in grads.values():
            dist.all_reduce(g)
        runs[dropout_p, reentrant] = {"loss": float(loss),
                                      "grads": {n: g.numpy() for n, g in grads.items()},
                                      "sharded": sharded,
                                      "restored": _restored([ids, pos, labels], before)}
    return runs


@pytest.fixture(scope="module")
def drop_in():
    """drop_in(world): _drop_in's results by rank on `world` processes (one launch per world
    size, shared by its tests)."""
    runs = {}

    def run(world):
        if world not in runs:
            runs[world] = run_processes(world, _drop_in, timeout=240, start="forkserver")
        return runs[world]

    return run


def _one_process(dropout_p, context=True, seed=STEP_SEED, reentrant=False):
    """The one-process run: under context_parallel(None) (cpattn.sdpa), or without a context
    (torch's own SDPA)."""
    loss, grads = _step(TinyLM(dropout_p, reentrant=reentrant), *_batch(), None,
                        context=context, seed=seed)
    return float(loss), {n: g.numpy() for n, g in grads.items()}


def _assert_close(got_loss, got_grads, want_loss, want_grads, tol):
    assert abs(got_loss - want_loss) <= tol * abs(want_loss), (got_loss, want_loss)
    assert got_grads.keys() == want_grads.keys()
    for name in want_grads:
        assert max_rel(got_grads[name], want_grads[name]) <= tol, \
            (name, max_rel(got_grads[name], want_grads[name]))


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("dropout_p", [0.0, 0.1])
def test_unmodified_model_under_context_parallel_equals_one_process(drop_in, world, dropout_p):
    """Loss and every parameter gradient on `world` processes equal one process's within
    CP_TOL. Without dropout the one-process run is the model as it is (torch's SDPA, no
    context); with dropout 0.1 it is cp=1 of cpattn (context_parallel(None): torch's SDPA draws
    other masks, of the same distribution), so equality shows cp=N's masks are cp=1's."""
    want_loss, want_grads = _one_process(dropout_p, context=dropout_p > 0)
    for r, runs in enumerate(drop_in(world)):
        got = runs[dropout_p, False]
        assert got["sharded"] == [True] * 3, (r, got["sharded"])
        assert got["restored"] == [True] * 3, (r, got["restored"])
        _assert_close(got["loss"], got["grads"], want_loss, want_grads, CP_TOL)
    if dropout_p > 0:  # not vacuous: other masks move the gradients far beyond CP_TOL
        _, other = _one_process(dropout_p, seed=STEP_SEED + 1)
        assert max(max_rel(other[n], want_grads[n]) for n in want_grads) > 1e3 * CP_TOL


@pytest.mark.parametrize("world", [2, 4])
def test_reentrant_checkpointing_under_context_parallel_equals_one_process(drop_in, world):
    """As above with use_reentrant=True and dropout 0.1: the recompute runs in the backward of
    checkpoint's own autograd Function, inside the engine; it must run cpattn over the group
    too, or its gradients are the attention of this rank's tokens alone, without an error."""
    want_loss, want_grads = _one_process(0.1, reentrant=True)
    for runs in drop_in(world):
        got = runs[0.1, True]
        _assert_close(got["loss"], got["grads"], want_loss, want_grads, CP_TOL)


def _group_of_one(rank, world):
    out = {}
    for dropout_p in (0.0, 0.1):
        model = TinyLM(dropout_p)
        ids, pos, labels = _batch()
        before = _buffers_state([ids, pos, labels])
        untouched = []
        loss, grads = _step(model, ids, pos, labels, dist.group.WORLD,
                            inside=lambda *b: untouched.extend(_restored(b, before)))
        out[dropout_p] = {"loss": float(loss), "grads": {n: g.numpy() for n, g in grads.items()},
                          "untouched": untouched,
                          "restored": _restored([ids, pos, labels], before)}
    return out


def test_a_group_of_one_and_none_run_on_one_rank_as_the_one_process_run(monkeypatch):
    """context_parallel over a group of one (a world of one process) and over None leaves the
    buffers as they are and runs the model on one rank: without dropout it equals the run
    without a context (torch's SDPA) within CP_TOL; with dropout it is cpattn.sdpa's run (the
    model's SDPA replaced by cpattn.sdpa): bitwise for None, within CP_TOL for the group of
    one (another process)."""
    (one,) = run_processes(1, _group_of_one, timeout=120, start="forkserver")
    for dropout_p in (0.0, 0.1):
        assert one[dropout_p]["untouched"] == [True] * 3
        assert one[dropout_p]["restored"] == [True] * 3

    ids, pos, labels = _batch()
    before = _buffers_state([ids, pos, labels])
    untouched = []
    none_loss, none_grads = _step(TinyLM(0.0), ids, pos, labels, None,
                                  inside=lambda *b: untouched.extend(_restored(b, before)))
    assert untouched == [True] * 3
    plain_loss, plain_grads = _one_process(0.0, context=False)
    for loss, grads in ((one[0.0]["loss"], one[0.0]["grads"]),
                        (float(none_loss), {n: g.numpy() for n, g in none_grads.items()})):
        _assert_close(loss, grads, plain_loss, plain_grads, CP_TOL)

    none_loss, none_grads = _one_process(0.1)
    monkeypatch.setattr(F, "scaled_dot_product_attention", cpattn.sdpa)
    direct_loss, direct_grads = _one_process(0.1, context=False)
    monkeypatch.undo()
    torch_loss, _ = _one_process(0.1, context=False)
    assert none_loss == direct_loss
    for n in direct_grads:
        assert np.array_equal(none_grads[n], direct_grads[n]), n
    # The process of one rank runs 1 thread, this one more (other summation orders in torch's
    # matmuls): within CP_TOL, where other dropout masks would be far off.
    _assert_close(one[0.1]["loss"], one[0.1]["grads"], direct_loss, direct_grads, CP_TOL)
    assert none_loss != torch_loss  # cpattn's masks, not torch's: the context ran cpattn


def test_a_wrapped_sdpa_still_runs_on_cpattn_in_the_context(monkeypatch):
    """F.scaled_dot_product_attention replaced by a wrapper that calls torch's SDPA (a
    profiler's, a library's): inside the context the call still runs on cpattn (with dropout 0.1,
    bitwise the run with cpattn.sdpa in the model), not on torch's kernel."""
    torch_sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", cpattn.sdpa)
    want_loss, want_grads = _one_process(0.1, context=False)
    monkeypatch.setattr(F, "scaled_dot_product_attention",
                        lambda *args, **kwargs: torch_sdpa(*args, **kwargs))
    got_loss, got_grads = _one_process(0.1)
    assert got_loss == want_loss
    for n in want_grads:
        assert np.array_equal(got_grads[n], want_grads[n]), n


# ---------------------------------------------------------------------------------------------
# 4. Misuse: cpattn.Error on every rank, within the deadline.

def _attend(x):
    """A small model's attention: two SDPA calls on x [1, 2, S, 8]."""
    y = F.scaled_dot_product_attention(x, x, x, is_causal=True)
    return F.scaled_dot_product_attention(y, y, y, is_causal=True)


def _run_misuse(rank, world, cases):
    """{(case name, *args): case(rank, world, *args)} for every case, one after another on the
    same group: each ends in the group's agreement (or in one rank's refusal of it), so the
    ranks start the next in step; a barrier before each keeps its time its own."""
    results = {}
    for case, args in cases:
        dist.barrier()
        try:
            results[(case.__name__,) + args] = case(rank, world, *args)
        except Exception as e:  # not a cpattn.Error: the case's test shows it
            results[(case.__name__,) + args] = {"code": type(e).__name__, "message": str(e),
                                                "seconds": None}
    return results


@pytest.fixture(scope="module")
def misuse():
    """misuse(case, *args): the outcomes by rank of case(rank, world, *args) on 2 processes.
    Every case of MISUSE_CASES runs in one launch, shared by the tests."""
    results = run_processes(2, _run_misuse, MISUSE_CASES, timeout=240, start="forkserver")
    return lambda case, *args: [r[(case.__name__,) + args] for r in results]


def _failure(fn):
    """{"code", "message", "seconds"} of the cpattn.Error fn() raises (code None: it ran)."""
    start = time.monotonic()
    try:
        fn()
    except cpattn.Error as e:
        return {"code": e.code, "message": str(e), "seconds": time.monotonic() - start}
    return {"code": None, "message": "", "seconds": time.monotonic() - start}


def _mask_case(rank, world, who):
    ids = torch.arange(16).reshape(1, 16)
    whole = ids.clone()
    mask = torch.ones(8, 8, dtype=torch.bool) if who == "every rank" or rank == 1 else None
    # Without buffers the ranks first sum their tokens for the whole length: rank 1 joins that.
    buffers = [] if who == "rank 1 only, no buffers" else [ids]

    def body():
        with cpattn.context_parallel(dist.group.WORLD, buffers=buffers,
                                     seq_dims=[1] * len(buffers), timeout=DEADLINE_S):
            x = torch.randn(1, 2, 8, 8)
            F.scaled_dot_product_attention(x, x, x, attn_mask=mask)

    failure = _failure(body)
    failure["restored"] = torch.equal(ids, whole)  # an exit by an exception restores too
    return failure


MASK_CASES = ["every rank", "rank 1 only", "rank 1 only, no buffers"]


@pytest.mark.parametrize("who", MASK_CASES)
def test_a_dense_attn_mask_inside_the_context_fails_every_rank_at_once(misuse, who):
    """An SDPA call with attn_mask inside the context: invalid_argument naming attn_mask on the
    ranks that pass it; a rank that does not raises rank_disagreement quoting it, at once; the
    buffers are whole again after the exception."""
    outcomes = misuse(_mask_case, who)
    for rank, o in enumerate(outcomes):
        masked = who == "every rank" or rank == 1
        assert o["code"] == ("invalid_argument" if masked else "rank_disagreement"), o
        assert "attn_mask is not supported by cpattn" in o["message"], o
        if not masked:
            assert "rank 1 refuses the call (invalid_argument: " in o["message"], o
        assert o["seconds"] < AT_ONCE_S, o
        assert o["restored"], o


def _buffers_case(rank, world, bad):
    S = 16
    if bad == "sequence lengths across ranks" and rank == 1:
        S = 17
    ids = torch.arange(S).reshape(1, S)
    labels = torch.arange(S).reshape(1, S)
    buffers, seq_dims = [ids, labels], [1, 1]
    if bad == "lengths between buffers on every rank" or \
            (bad == "lengths between buffers on rank 1" and rank == 1):
        buffers[1] = labels[:, 1:]
    elif bad == "the same buffer twice":
        buffers[1] = ids
    elif bad == "a seq_dim beyond the buffer on rank 1" and rank == 1:
        seq_dims[1] = 2
    elif bad == "seq_dims across ranks":  # a [16, 16] buffer: sharded along 0 or along 1
        buffers[1], seq_dims[1] = torch.zeros(S, S), rank
    elif bad == "a buffer that requires grad":
        buffers[1] = torch.zeros(1, S, requires_grad=True)
    elif bad == "an inference tensor on rank 1" and rank == 1:
        with torch.inference_mode():  # set_ refuses it outside inference mode
            buffers[1] = torch.arange(S).reshape(1, S)
    layout = "striped" if bad == "layouts across ranks" and rank == 1 else "zigzag"
    whole = [b.detach().clone() for b in buffers]

    def body():
        with cpattn.context_parallel(dist.group.WORLD, buffers=buffers, seq_dims=seq_dims,
                                     layout=layout, timeout=DEADLINE_S):
            _attend(torch.randn(1, 2, ids.shape[1], 8))

    failure = _failure(body)
    failure["untouched"] = all(torch.equal(b, w) for b, w in zip(buffers, whole))
    return failure


BUFFER_CASES = ["sequence lengths across ranks", "lengths between buffers on every rank",
                "lengths between buffers on rank 1", "the same buffer twice",
                "a seq_dim beyond the buffer on rank 1", "seq_dims across ranks",
                "layouts across ranks", "a buffer that requires grad",
                "an inference tensor on rank 1"]


@pytest.mark.parametrize("bad,codes,needles", [
    # Rank 1's buffers hold 17 tokens, rank 0's 16: the entry agreement names both.
    ("sequence lengths across ranks", ("rank_disagreement", "rank_disagreement"),
     ("context_parallel: the ranks do not enter the context alike", r"entry \d+: 16 tokens",
      r"entry \d+: 17 tokens")),
    ("lengths between buffers on every rank", ("shape_mismatch", "shape_mismatch"),
     (re.escape("the buffers' sequence lengths differ: buffers[0] has 16, buffers[1] has 15"),)),
    ("lengths between buffers on rank 1", ("rank_disagreement", "shape_mismatch"),
     (re.escape("the buffers' sequence lengths differ: buffers[0] has 16, buffers[1] has 15"),)),
    ("the same buffer twice", ("invalid_argument", "invalid_argument"),
     (re.escape("buffers[1] is buffers[0] again"),)),
    ("a seq_dim beyond the buffer on rank 1", ("rank_disagreement", "invalid_argument"),
     (re.escape("seq_dims[1] = 2 is not a dimension of buffers[1] (shape (1, 16))"),)),
    # Each rank's buffers are fine alone, but they would be sharded differently.
    ("seq_dims across ranks", ("rank_disagreement", "rank_disagreement"),
     (r"entry \d+: 16 tokens, zigzag, seq_dims 1,0",
      r"entry \d+: 16 tokens, zigzag, seq_dims 1,1")),
    ("layouts across ranks", ("rank_disagreement", "rank_disagreement"),
     (r"entry \d+: 16 tokens, zigzag, seq_dims 1,1",
      r"entry \d+: 16 tokens, striped, seq_dims 1,1")),
    ("a buffer that requires grad", ("invalid_argument", "invalid_argument"),
     (re.escape("buffers[1] requires grad"),)),
    # Refused before the agreement: rank 0 shards nothing either.
    ("an inference tensor on rank 1", ("rank_disagreement", "invalid_argument"),
     (re.escape("buffers[1] is an inference tensor (made under torch.inference_mode)"),)),
])
def test_buffers_that_disagree_fail_every_rank_at_once(misuse, bad, codes, needles):
    """Buffers the context cannot shard alike on every rank: each rank raises (its own error,
    or rank_disagreement quoting the rank that refused) at entry, before sharding anything.
    needles are regular expressions (the entry's number depends on the cases before it)."""
    outcomes = misuse(_buffers_case, bad)
    for rank, o in enumerate(outcomes):
        assert o["code"] == codes[rank], o
        for needle in needles:
            assert re.search(needle, o["message"]), (needle, o)
        if o["code"] == "rank_disagreement" and codes[1 - rank] != "rank_disagreement":
            assert "rank 1 refuses the call" in o["message"], o
        assert o["seconds"] < AT_ONCE_S, o
        assert o["untouched"], o  # refused on entry: nothing was sharded


def _outside_case(rank, world, how):
    ids = torch.arange(16).reshape(1, 16)
    x_local = torch.randn(1, 2, 8, 8)
    x_whole = torch.randn(1, 2, 16, 8)
    group = dist.group.WORLD
    deadline = NEVER_DEADLINE_S if how == "never enters" else DEADLINE_S
    if rank == 0:
        def body():
            with cpattn.context_parallel(group, buffers=[ids], seq_dims=[1], timeout=deadline):
                _attend(x_local)
    elif how == "never enters":
        def body():
            _attend(x_whole)  # torch's SDPA: rank 1 does not know of the context
            time.sleep(deadline + 3)  # and stays (its next step, a data loader)
    else:  # "leaves before its SDPA calls"
        def body():
            with cpattn.context_parallel(group, buffers=[ids], seq_dims=[1], timeout=deadline):
                pass
            _attend(x_whole)
    return _failure(body)


def test_a_rank_that_never_enters_makes_the_other_raise_within_the_deadline():
    """Rank 1 runs the model without the context (torch's SDPA on the whole sequence): rank 0
    raises timeout at the context's deadline instead of hanging."""
    rank0, rank1 = run_processes(2, _outside_case, "never enters", timeout=60, start="forkserver")
    assert rank1["code"] is None  # it never called cpattn: nothing to raise
    # Rank 0 waits at the context's entry agreement until its deadline (rank 1 is alive).
    assert rank0["code"] == "timeout", rank0
    assert NEVER_DEADLINE_S - 1 <= rank0["seconds"] <= NEVER_DEADLINE_S + 3, rank0


def test_a_rank_that_calls_sdpa_after_leaving_fails_every_rank_at_once(misuse):
    """Rank 1 leaves the context (its exit agreement) while rank 0 makes its first SDPA call
    inside: the two meet in cpattn's call agreement and both raise rank_disagreement naming
    where each is, instead of crossing messages of different sizes (gloo aborts the process
    then)."""
    rank0, rank1 = misuse(_outside_case, "leaves before its SDPA calls")
    for o in (rank0, rank1):
        assert o["code"] == "rank_disagreement", o
        assert "rank 1 at context_parallel exit after 0 SDPA calls" in o["message"], o
        assert "rank 0 at test_sdpa.py:" in o["message"], o
        assert o["seconds"] < AT_ONCE_S, o
    assert rank1["message"].startswith("context_parallel: the ranks leave the context after "
                                       "different numbers of scaled_dot_product_attention"), rank1


def _skip_case(rank, world):
    ids = torch.arange(16).reshape(1, 16)

    def body():
        with cpattn.context_parallel(dist.group.WORLD, buffers=[ids], seq_dims=[1],
                                     timeout=DEADLINE_S):
            x = torch.randn(1, 2, 8, 8)
            y = F.scaled_dot_product_attention(x, x, x, is_causal=True)
            if rank == 0:  # rank 1 skips the second layer
                F.scaled_dot_product_attention(y, y, y, is_causal=True)

    return _failure(body)


def test_a_rank_that_makes_fewer_sdpa_calls_fails_every_rank_at_once(misuse):
    """Rank 1 skips a layer: rank 0's second SDPA call meets rank 1's exit agreement, and both
    raise rank_disagreement naming rank 1's count and rank 0's call site."""
    for o in misuse(_skip_case):
        assert o["code"] == "rank_disagreement", o
        assert re.search(r"rank 1 at context_parallel exit after 1 SDPA call(?!s)",
                         o["message"]), o
        assert "rank 0 at test_sdpa.py:" in o["message"], o
        assert o["seconds"] < AT_ONCE_S, o


class _ModelBug(ValueError):
    """An exception of the model's own code (a data-dependent check, a bug) on some ranks."""


def _exception_case(rank, world, where):
    ids = torch.arange(16).reshape(1, 16)
    labels = torch.arange(16).reshape(1, 16)
    whole = ids.clone()
    fails = where.startswith("every rank") or rank == 1
    start = time.monotonic()

    def check(point):
        if fails and point in where:
            if "one-rank call" in where:  # a cpattn.Error no other rank took part in
                cpattn.attention(torch.randn(2, 8, 8), torch.randn(2, 8, 8), torch.randn(2, 8, 8))
            raise _ModelBug(f"loss is nan on rank {rank}")

    def step(x):
        check("before its first SDPA call")
        loss = _attend(x).sum()
        check("after the forward")  # rank 0 goes on to the backward's call
        try:
            loss.backward()
        except cpattn.Error as e:
            if where == "rank 1 after the forward, rank 0 re-raising":
                raise _ModelBug("step failed") from e  # what the group knows: not announced
            raise
        check("before the exit")

    try:
        with cpattn.context_parallel(dist.group.WORLD, buffers=[ids], seq_dims=[1],
                                     timeout=DEADLINE_S):
            x = torch.randn(1, 2, 8, 8, requires_grad=True)
            if "in a nested context" in where:  # over the same group: announced once
                with cpattn.context_parallel(dist.group.WORLD, buffers=[labels], seq_dims=[1],
                                             timeout=DEADLINE_S):
                    step(x)
            else:
                step(x)
        outcome = {"code": None, "message": ""}
    except cpattn.Error as e:
        outcome = {"code": e.code, "message": str(e)}
    except _ModelBug as e:
        outcome = {"code": "_ModelBug", "message": str(e)}
    outcome["seconds"] = time.monotonic() - start
    outcome["restored"] = torch.equal(ids, whole) and torch.equal(labels, whole)
    return outcome


# First in MISUSE_CASES: a failure announced twice, or not at all, would put the ranks a step
# apart, and every case after them would fail.
EXCEPTION_CASES = ["rank 1 before its first SDPA call", "rank 1 after the forward",
                   "rank 1 before the exit", "every rank after the forward",
                   "rank 1 in a one-rank call before the exit",
                   "rank 1 in a nested context after the forward",
                   "rank 1 after the forward, rank 0 re-raising"]


@pytest.mark.parametrize("where", EXCEPTION_CASES)
def test_an_exception_in_the_block_on_one_rank_fails_every_rank_at_once(misuse, where):
    """The block's code raises on rank 1 (rank 1 stays alive: it goes on to the next case), once
    in a one-rank cpattn call (a cpattn.Error the group did not see), once inside a context
    nested over the same group. Rank 1 raises its own exception; rank 0, at its next SDPA call,
    its backward or the exit agreement, raises rank_disagreement naming it at once, not at its
    deadline. When every rank raises, each raises its own, at once. A rank that re-raises the
    disagreement as another exception does not announce it again (the cases after these run in
    step: a second announcement would meet their first call)."""
    rank0, rank1 = misuse(_exception_case, where)
    if "one-rank call" in where:
        assert rank1["code"] == "shape_mismatch", rank1
        announced = "Error: q must be a 4-dimensional tensor"
    else:
        assert rank1["code"] == "_ModelBug" and rank1["message"] == "loss is nan on rank 1", rank1
        announced = "_ModelBug: loss is nan on rank 1"
    if where.startswith("every rank"):
        assert rank0["code"] == "_ModelBug" and rank0["message"] == "loss is nan on rank 0"
    elif where.endswith("rank 0 re-raising"):
        assert rank0["code"] == "_ModelBug" and rank0["message"] == "step failed", rank0
    else:
        assert rank0["code"] == "rank_disagreement", rank0
        assert f"rank 1 left the context_parallel block with {announced}" in rank0["message"], \
            rank0
    for o in (rank0, rank1):
        assert o["seconds"] < AT_ONCE_S, o
        assert o["restored"], o


def _inference_eval(rank, world):
    """An evaluation under torch.inference_mode, its buffers made there too: the context shards
    and restores them (set_ works on inference tensors inside inference mode)."""
    torch.manual_seed(3)
    x_whole = torch.randn(1, 2, 16, 8)
    with torch.inference_mode():
        ids = torch.arange(16).reshape(1, 16)
        with cpattn.context_parallel(dist.group.WORLD, buffers=[ids], seq_dims=[1],
                                     timeout=DEADLINE_S):
            mine = x_whole[:, :, ids[0]]
            out = F.scaled_dot_product_attention(mine, mine, mine, is_causal=True)
        want = F.scaled_dot_product_attention(x_whole, x_whole, x_whole, is_causal=True)
        local = cpattn.shard(want, dim=2)
        return {"restored": torch.equal(ids, torch.arange(16).reshape(1, 16)),
                "err": (out - local).abs().max().item()}


def test_an_evaluation_under_inference_mode_runs_under_context_parallel():
    for o in run_processes(2, _inference_eval, timeout=120):
        assert o["restored"], o
        assert o["err"] < 1e-5, o


def _steps_apart(rank, world):
    """Three steps of a loop that goes on after a failed step. In step 0 rank 1 leaves its block
    by a KeyboardInterrupt, which is not announced (a rank interrupted by hand leaves at once):
    rank 0's SDPA call then meets rank 1's entry of step 1. From there on rank 1 is a step ahead;
    each step's entry must fail on both ranks instead of running two steps' shards together."""
    outcomes = []
    for step in range(3):
        ids = torch.arange(16).reshape(1, 16)
        try:
            with cpattn.context_parallel(dist.group.WORLD, buffers=[ids], seq_dims=[1],
                                         timeout=DEADLINE_S):
                x = torch.randn(1, 2, 8, 8)
                if rank == 1 and step == 0:
                    raise KeyboardInterrupt
                F.scaled_dot_product_attention(x, x, x, is_causal=True)
            outcomes.append({"code": None, "message": ""})
        except cpattn.Error as e:
            outcomes.append({"code": e.code, "message": str(e)})
        except KeyboardInterrupt:
            outcomes.append({"code": "KeyboardInterrupt", "message": ""})
    return outcomes


def test_ranks_a_step_apart_fail_at_every_entry():
    """The entry agreement compares how many contexts each rank entered over the group: ranks
    a step apart (the shapes and call numbers alike) fail loudly at every step, naming both."""
    rank0, rank1 = run_processes(2, _steps_apart, timeout=120, start="forkserver")
    assert rank1[0]["code"] == "KeyboardInterrupt", rank1
    # Rank 0's SDPA call of step 0 met rank 1's entry of step 1: both raise there.
    assert rank0[0]["code"] == "rank_disagreement", rank0
    assert rank1[1]["code"] == "rank_disagreement", rank1
    # Rank 0's step 1 meets rank 1's step 2: same shapes and call numbers, other entries.
    for o in (rank0[1], rank1[2]):
        assert o["code"] == "rank_disagreement", o
        assert "rank 0 at context entry 1: 16 tokens" in o["message"], o
        assert "rank 1 at context entry 2: 16 tokens" in o["message"], o
        assert o["message"].startswith("context_parallel: the ranks do not enter the context "
                                       "alike"), o
    # Rank 1 has finished its three steps and left.
    assert rank0[2]["code"] in ("peer_failed", "communication", "timeout"), rank0


def _shape_case(rank, world, field):
    ids = torch.arange(16).reshape(1, 16)
    heads, head_dim = (4 if field == "heads" else 2), (16 if field == "head_dim" else 8)
    if rank == 0:
        heads, head_dim = 2, 8
    x = torch.randn(1, heads, 8, head_dim)

    def body():
        with cpattn.context_parallel(dist.group.WORLD, buffers=[ids], seq_dims=[1],
                                     timeout=DEADLINE_S):
            F.scaled_dot_product_attention(x, x, x, is_causal=True)

    return _failure(body)


@pytest.mark.parametrize("field,theirs", [("heads", "[1, S_r, 4, 8]"),
                                          ("head_dim", "[1, S_r, 2, 16]")])
def test_sdpa_calls_whose_shapes_differ_across_ranks_fail_naming_the_field(misuse, field,
                                                                            theirs):
    """SDPA calls of other heads or head dims on rank 1: rank_disagreement on both ranks, at
    once, naming the field (q's shape) and both values."""
    for o in misuse(_shape_case, field):
        assert o["code"] == "rank_disagreement", o
        assert "rank 0 has q shape=[1, S_r, 2, 8]" in o["message"], o
        assert f"rank 1 has q shape={theirs}" in o["message"], o
        assert o["seconds"] < AT_ONCE_S, o


MISUSE_CASES = [(_exception_case, (where,)) for where in EXCEPTION_CASES] + \
    [(_mask_case, (who,)) for who in MASK_CASES] + \
    [(_buffers_case, (bad,)) for bad in BUFFER_CASES] + \
    [(_outside_case, ("leaves before its SDPA calls",)), (_skip_case, ()),
     (_shape_case, ("heads",)), (_shape_case, ("head_dim",))]


def _nested_over_the_same_buffers(rank, world):
    ids = torch.arange(8).view(1, 8)
    with cpattn.context_parallel(dist.group.WORLD, buffers=[ids], seq_dims=[1], timeout=20):
        try:
            with cpattn.context_parallel(dist.group.WORLD, buffers=[ids], seq_dims=[1],
                                         timeout=20):
                pass
            inner = (None, "")
        except cpattn.Error as e:
            inner = (e.code, str(e))
        try:  # a one-rank context would run its SDPA calls on the shard alone
            with cpattn.context_parallel(None, buffers=[ids], seq_dims=[1]):
                pass
            one_rank = (None, "")
        except cpattn.Error as e:
            one_rank = (e.code, str(e))
        shard = ids.tolist()
    return inner, one_rank, shard, ids.tolist()


def test_a_nested_context_over_an_already_sharded_buffer_is_refused():
    for rank, (inner, one_rank, shard, after) in enumerate(
            run_processes(2, _nested_over_the_same_buffers)):
        assert inner[0] in ("invalid_argument", "rank_disagreement"), inner
        assert "already this rank's shard" in inner[1], inner
        assert one_rank[0] == "invalid_argument", one_rank
        assert "buffers[0] is already this rank's shard" in one_rank[1], one_rank
        assert len(shard[0]) == 4 and after == [list(range(8))], (rank, shard, after)
