"""The bug cpattn exists to end, in PyTorch: context-parallel attention with dropout under
torch.utils.checkpoint (forward twice, backward once). A 4-layer residual model with attention
dropout 0.1 on 4 processes (gloo, zigzag, causal), every layer checkpointed with
use_reentrant=True and False and with cpattn.checkpoint: every parameter gradient equals the run
without checkpointing bitwise, and the cp=1 run to 1e-5. Microbatches backward in any order
equal their isolated runs. Recomputes that replay other RNG are refused. The checkpointing
check runs for the other CP strategies too."""

import numpy as np
import pytest
import torch

import cpattn
from helpers import max_rel, run_processes
from models import Stack, checkpointers, grads_of

S, B = 48, 2


def _tokens():
    return torch.randn(B, S, 8, generator=torch.Generator().manual_seed(3))


def _train_step(rank, world, mode, strategy="ring"):
    model = Stack(ring=True, strategy=strategy)
    tokens = cpattn.shard(_tokens())
    ckpt = None if mode == "none" else checkpointers()[mode]
    torch.manual_seed(100)  # the dropout streams: the same on every rank
    y = model(tokens, checkpoint=ckpt)
    (y * cpattn.shard(torch.linspace(-1, 1, B * S * 32).reshape(B, S, 32))).sum().backward()
    stats = cpattn.memory_stats()
    return grads_of(model), stats["live_forward_results"]


@pytest.fixture(scope="module")
def plain_cp4():
    return run_processes(4, _train_step, "none")


@pytest.fixture(scope="module")
def plain_cp1():
    return run_processes(1, _train_step, "none")[0]


@pytest.mark.parametrize("mode", sorted(checkpointers()))
def test_checkpointed_gradients_equal_plain_bitwise_and_cp1(mode, plain_cp4, plain_cp1):
    got = run_processes(4, _train_step, mode)
    for rank in range(4):
        grads, live = got[rank]
        plain, _ = plain_cp4[rank]
        assert live == 0, "no ForwardResult outlives its backward"
        for name in plain:
            assert np.array_equal(grads[name], plain[name]), f"{mode} rank {rank} {name}"
    # Weight gradients are per-rank partial sums over the rank's tokens; their sum over ranks
    # is the cp=1 gradient.
    one, _ = plain_cp1
    for name in one:
        total = sum(got[r][0][name].astype(np.float64) for r in range(4))
        assert max_rel(total, one[name]) <= 1e-5, name


@pytest.mark.parametrize("strategy", ["allgather", "ulysses", "hybrid:2x2"])
def test_every_strategy_checkpointed_equals_plain_bitwise_and_cp1(strategy, plain_cp1):
    plain = run_processes(4, _train_step, "none", strategy)
    one, _ = plain_cp1
    for mode in ("torch_non_reentrant", "cpattn"):
        got = run_processes(4, _train_step, mode, strategy)
        for rank in range(4):
            grads, live = got[rank]
            assert live == 0, "no ForwardResult outlives its backward"
            for name in grads:
                assert np.array_equal(grads[name], plain[rank][0][name]), \
                    f"{strategy} {mode} rank {rank} {name}"
        for name in one:
            total = sum(got[r][0][name].astype(np.float64) for r in range(4))
            assert max_rel(total, one[name]) <= 1e-5, f"{strategy} {name}"


def test_cp4_plain_equals_cp1(plain_cp4, plain_cp1):
    one, _ = plain_cp1
    for name in one:
        total = sum(plain_cp4[r][0][name].astype(np.float64) for r in range(4))
        assert max_rel(total, one[name]) <= 1e-5, name


def _microbatch_grads(model, tokens, target, rng_state):
    torch.set_rng_state(rng_state)
    loss = (model(tokens) * target).sum()
    return loss


def _pipeline(rank, world, order):
    model = Stack(ring=True)
    params = list(model.parameters())
    mb = [cpattn.shard(_tokens()), cpattn.shard(_tokens().flip(1))]
    target = cpattn.shard(torch.linspace(-1, 1, B * S * 32).reshape(B, S, 32))
    torch.manual_seed(7)
    states = []
    losses = []
    for tokens in mb:  # both forwards first, as a pipeline schedule does
        states.append(torch.get_rng_state())
        losses.append((model(tokens) * target).sum())
    together = [None, None]
    for i in (order if order == [0, 1] else [1, 0]):
        together[i] = [g.numpy() for g in torch.autograd.grad(losses[i], params)]
    alone = []
    for i, tokens in enumerate(mb):  # each microbatch on its own, with its own RNG stream
        loss = _microbatch_grads(model, tokens, target, states[i])
        alone.append([g.numpy() for g in torch.autograd.grad(loss, params)])
    return together, alone


@pytest.mark.parametrize("order", [[0, 1], [1, 0]], ids=["forward_order", "reverse_order"])
def test_microbatches_backward_in_any_order_equal_isolated_runs(order):
    for together, alone in run_processes(4, _pipeline, order):
        for i in range(2):
            for a, b in zip(together[i], alone[i]):
                assert np.array_equal(a, b)


def _without_rng_preservation(rank, world, guard):
    model = Stack(ring=True)
    tokens = cpattn.shard(_tokens())

    def ckpt(fn, x):
        if guard:
            return cpattn.checkpoint(fn, x, preserve_rng_state=False)
        return torch.utils.checkpoint.checkpoint(fn, x, use_reentrant=False,
                                                 preserve_rng_state=False)

    torch.manual_seed(1)
    model(tokens, checkpoint=ckpt).sum().backward()


@pytest.mark.parametrize("guard", [True, False], ids=["cpattn_checkpoint", "torch_checkpoint"])
def test_recompute_with_other_rng_is_refused(guard):
    outcomes = run_processes(2, _without_rng_preservation, guard, expect_errors=True)
    for status, message in outcomes:
        assert status == "error"
        if guard:
            assert "recompute diverged: attention call 1 of the checkpointed function drew " \
                   "RngState {seed=" in message
        else:
            # Without the guard the backward still refuses out/lse recomputed with another
            # dropout stream than the forward's.
            assert "recompute diverged: out/lse were recomputed" in message
            assert "ForwardResult was produced with rng={seed=" in message


def _arguments_changed_before_recompute(rank, world, field, first, second, checkpointing):
    """A checkpointed ring_attention whose non-tensor argument `field` changes between the
    forward and the recompute autograd runs in backward."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (cpattn.shard(torch.randn(1, 24, 2, 8, generator=g)) for _ in range(3))
    q.requires_grad_()
    kwargs = {"causal": True, "dropout_p": 0.1, "softcap": 2.0, field: first}

    def attend(x):
        return cpattn.ring_attention(x, k, v, **kwargs)

    torch.manual_seed(7)
    out = checkpointers()[checkpointing](attend, q)
    kwargs[field] = second
    out.sum().backward()


@pytest.mark.parametrize("checkpointing", ["torch_non_reentrant", "cpattn", "cpattn_reentrant"])
@pytest.mark.parametrize("field,first,second,texts", [
    ("softcap", 2.0, 3.0, ("2", "3")), ("softmax_scale", 0.3, 0.5, ("0.3", "0.5")),
    ("causal", True, False, ("true", "false")), ("dropout_p", 0.1, 0.2, ("0.1", "0.2"))])
def test_recompute_with_other_arguments_is_refused(field, first, second, texts, checkpointing):
    """softcap, softmax_scale, causal and dropout_p are not tensors: autograd replays the
    forward with whatever they are at backward time. out/lse computed with other ones would give
    another function's gradients, silently: refused on every rank, naming the field."""
    outcomes = run_processes(2, _arguments_changed_before_recompute, field, first, second,
                             checkpointing, expect_errors=True)
    for status, message in outcomes:
        assert status == "error"
        assert "recompute diverged" in message, message
        if checkpointing == "torch_non_reentrant":  # the op's backward sees the recompute's state
            assert f"produced with {field}={texts[1]}, backward called with {field}={texts[0]}" \
                in message, message
        else:  # cpattn.checkpoint compares the recompute with the first forward
            assert f"produced with {field}={texts[0]}, recompute called with {field}={texts[1]}" \
                in message, message
