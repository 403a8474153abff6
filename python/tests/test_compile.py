"""torch.compile(fullgraph=True) of transformer blocks that call cpattn.attention (one rank) and
cpattn.ring_attention (2 gloo processes): no graph break, and outputs and gradients bitwise
equal to eager, with dropout 0.1, also under torch.utils.checkpoint(use_reentrant=False)."""

import pytest
import torch
import torch.utils.checkpoint

import cpattn
from helpers import run_processes

D_MODEL, HEADS, KV_HEADS, HEAD_DIM = 32, 4, 2, 8


class Block(torch.nn.Module):
    """x + W_o attn(x), then x + W_2 relu(W_1 x): attention by cpattn (ring over `group` when
    given), the rest plain torch."""

    def __init__(self, index, group, seq_len, dropout_p):
        super().__init__()
        self.index, self.group, self.seq_len, self.dropout_p = index, group, seq_len, dropout_p
        self.wq = torch.nn.Linear(D_MODEL, HEADS * HEAD_DIM, bias=False)
        self.wk = torch.nn.Linear(D_MODEL, KV_HEADS * HEAD_DIM, bias=False)
        self.wv = torch.nn.Linear(D_MODEL, KV_HEADS * HEAD_DIM, bias=False)
        self.wo = torch.nn.Linear(HEADS * HEAD_DIM, D_MODEL, bias=False)
        self.w1 = torch.nn.Linear(D_MODEL, 2 * D_MODEL, bias=False)
        self.w2 = torch.nn.Linear(2 * D_MODEL, D_MODEL, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, HEADS, HEAD_DIM)
        k = self.wk(x).view(b, s, KV_HEADS, HEAD_DIM)
        v = self.wv(x).view(b, s, KV_HEADS, HEAD_DIM)
        site = f"block {self.index}"
        if self.group is None:
            a = cpattn.attention(q, k, v, causal=True, dropout_p=self.dropout_p, call_site=site)
        else:
            a = cpattn.ring_attention(q, k, v, group=self.group, causal=True,
                                      dropout_p=self.dropout_p, seq_len=self.seq_len,
                                      timeout=120, call_site=site)
        x = x + self.wo(a.reshape(b, s, HEADS * HEAD_DIM))
        return x + self.w2(torch.relu(self.w1(x)))


class Model(torch.nn.Module):
    def __init__(self, group=None, seq_len=None, dropout_p=0.1, recompute=False, blocks=2):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(Block(i, group, seq_len, dropout_p)
                                          for i in range(blocks))
        self.recompute = recompute

    def forward(self, x):
        for block in self.blocks:
            if self.recompute:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return x


def _step(model, x, seed):
    """(output, input gradient, parameter gradients) of one forward + backward from `seed`."""
    model.zero_grad()
    x = x.detach().clone().requires_grad_()
    torch.manual_seed(seed)
    y = model(x)
    (y * torch.arange(y.numel(), dtype=y.dtype).view_as(y).sin()).sum().backward()
    return [y.detach(), x.grad] + [p.grad.clone() for p in model.parameters()]


def _assert_bitwise(eager, compiled):
    assert len(eager) == len(compiled)
    for i, (a, b) in enumerate(zip(eager, compiled)):
        assert torch.equal(a, b), f"tensor {i}: max |diff| {(a - b).abs().max().item()}"


@pytest.mark.parametrize("recompute", [False, True])
def test_compiled_block_with_cpattn_attention_is_bitwise_eager(recompute):
    torch._dynamo.reset()
    model = Model(recompute=recompute)
    x = torch.randn(2, 37, D_MODEL)
    eager = [_step(model, x, seed) for seed in (1, 2)]
    compiled_model = torch.compile(model, fullgraph=True)
    compiled = [_step(compiled_model, x, seed) for seed in (1, 2)]
    for e, c in zip(eager, compiled):
        _assert_bitwise(e, c)
    assert not torch.equal(eager[0][0], eager[1][0])  # the steps drew other dropout masks
    # Inductor reuses a dead attention output's memory (owned by its forward result) for a
    # tensor of the same size that the step returns (y, x.grad): the results keep that memory,
    # nothing else does.
    del eager, compiled, e, c
    assert cpattn.memory_stats()["live_forward_results"] == 0


@pytest.mark.parametrize("recompute", [False, True])
def test_compiled_block_under_autocast_is_bitwise_eager(recompute):
    """Under torch.autocast("cpu", bfloat16) (cpattn's autocast checks trace with fullgraph; q, k
    and v come from bf16 projections): the output and every parameter gradient bitwise eager. The
    input gradient is held to bf16 rounding only: it sums bf16 contributions of the four
    projections, which inductor orders otherwise than eager's autograd (with torch's own SDPA in
    place of cpattn it differs the same way, 2.4e-3)."""
    torch._dynamo.reset()
    model = Model(recompute=recompute)
    x = torch.randn(2, 37, D_MODEL)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        eager = _step(model, x, 1)
        compiled = _step(torch.compile(model, fullgraph=True), x, 1)
    _assert_bitwise(eager[:1] + eager[2:], compiled[:1] + compiled[2:])
    x_grad, compiled_x_grad = eager[1], compiled[1]
    assert (x_grad - compiled_x_grad).abs().max() <= 2.0 ** -8 * x_grad.abs().max()


def _compiled_refusal(rank, world, bad):
    """Rank 1 compiles a call with `bad` arguments, rank 0 the same call with good ones: the
    rank that refuses while dynamo traces still takes part in the call when it runs."""
    import time
    import torch.distributed as dist
    torch._dynamo.reset()
    q = torch.randn(1, 8, 2, 4, requires_grad=True)  # training: AOTAutograd traces a backward
    kwargs = {"causal": True, "timeout": 60, "call_site": "s"}
    arg = q
    if rank == 1 and bad == "causal":
        kwargs["causal"] = 1
    if rank == 1 and bad == "3-D q":
        arg = q[0]

    def f(x):
        return cpattn.ring_attention(x, q, q, **kwargs).sum()

    start = time.monotonic()
    try:
        torch.compile(f, fullgraph=True)(arg)
        outcome = (None, "")
    except cpattn.Error as e:
        outcome = (e.code, str(e))
    elapsed = time.monotonic() - start
    # The group stays in step: a good compiled call runs on both ranks after the refusal.
    kwargs["causal"] = True
    good = torch.compile(f, fullgraph=True)(q).detach()
    dist.all_reduce(good)  # the same sum on both ranks
    return outcome, elapsed, float(good)


@pytest.mark.parametrize("bad,code,needle", [
    ("causal", "invalid_argument", "causal must be a bool, got 1"),
    ("3-D q", "shape_mismatch", "q must be a 4-dimensional tensor")])
def test_a_rank_refusing_while_it_traces_fails_every_rank_at_once(bad, code, needle):
    """A call that one rank's Python-side checks refuse while torch.compile(fullgraph=True)
    traces it: that rank's compiled code refuses when it runs (a refuse_call op in its graph),
    joining the call as a refusing rank, so both ranks raise at once (before: dynamo's
    Unsupported on that rank, and the other rank waiting out its deadline)."""
    results = run_processes(2, _compiled_refusal, bad, timeout=600, start="forkserver")
    (code0, msg0), elapsed0, good0 = results[0]
    (code1, msg1), elapsed1, good1 = results[1]
    assert code1 == code and needle in msg1, msg1
    assert code0 == "rank_disagreement" and needle in msg0, msg0
    # Compiling takes seconds; the deadline is 60 s.
    assert elapsed0 < 45 and elapsed1 < 45, (elapsed0, elapsed1)
    assert good0 == good1


def _compiled_ring(rank, world, recompute):
    import torch.distributed as dist
    torch._dynamo.reset()
    seq_len = 29
    model = Model(group=dist.group.WORLD, seq_len=seq_len, recompute=recompute)
    torch.manual_seed(5)
    x = cpattn.shard(torch.randn(2, seq_len, D_MODEL))
    eager = _step(model, x, 1)
    compiled = _step(torch.compile(model, fullgraph=True), x, 1)
    _assert_bitwise(eager, compiled)
    return [t.numpy() for t in eager[:2]]


@pytest.mark.parametrize("recompute", [False, True])
def test_compiled_block_with_ring_attention_on_two_processes_is_bitwise_eager(recompute):
    results = run_processes(2, _compiled_ring, recompute, timeout=600, start="forkserver")
    assert len(results) == 2
