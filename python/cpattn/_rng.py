"""The dropout RngState of one attention call, drawn from torch's default CPU generator.

Drawing from torch's generator means: torch.manual_seed makes runs repeatable; every rank seeded
alike draws the same state (so cp=N uses the same dropout masks as cp=1); and
torch.utils.checkpoint's preserve_rng_state replays the same state in the recompute.
"""

import torch

_U64 = (1 << 64) - 1


def draw_rng_state(dropout_p):
    """(seed, offset) as unsigned 64-bit ints; (0, 0) without dropout (no RNG is consumed)."""
    if dropout_p == 0.0:
        return 0, 0
    words = torch.randint(-(1 << 63), (1 << 63) - 1, (2,), dtype=torch.int64)
    return int(words[0]) & _U64, int(words[1]) & _U64


def rng_tensor(seed, offset):
    """The state as an int64 tensor of 2 (saved for backward, recomputed by checkpointing)."""
    signed = [x - (1 << 64) if x >= (1 << 63) else x for x in (seed, offset)]
    return torch.tensor(signed, dtype=torch.int64)


def rng_of(t):
    """Inverse of rng_tensor."""
    return int(t[0]) & _U64, int(t[1]) & _U64
