"""Soak: 1000 checkpointed forward+backward steps with dropout leave no ForwardResult alive and
cpattn's live bytes at their baseline (a global per-step stack would grow by one entry per step
under recompute)."""

import torch

import cpattn
from models import Stack

STEPS = 1000


def test_thousand_checkpointed_steps_leave_nothing_behind():
    model = Stack(layers=2, d_model=16, heads=2, kv_heads=1, ring=False)
    tokens = torch.randn(1, 32, 8, generator=torch.Generator().manual_seed(0))
    baseline = cpattn.memory_stats()
    torch.manual_seed(0)
    for step in range(STEPS):
        y = model(tokens, checkpoint=lambda fn, x: cpattn.checkpoint(fn, x))
        y.square().mean().backward()
        model.zero_grad(set_to_none=True)
        if step == 0:
            after_first = cpattn.memory_stats()
    del y
    end = cpattn.memory_stats()
    assert end["live_forward_results"] == 0
    assert end["live_bytes"] == baseline["live_bytes"]
    assert after_first["live_bytes"] == baseline["live_bytes"]
    assert end["peak_forward_results"] >= 1  # the loop did make ForwardResults
