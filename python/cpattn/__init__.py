"""cpattn for PyTorch: exact scaled-dot-product attention, forward and backward, on one rank or
context-parallel over a torch.distributed process group (cpattn's C++ ring, allgather, Ulysses
or hybrid strategy), safe under activation checkpointing with dropout. See docs/pytorch.md.

    out = cpattn.attention(q, k, v, causal=True, dropout_p=0.1)            # one rank
    out = cpattn.ring_attention(q_local, k_local, v_local, causal=True)   # this rank's shard
    y = cpattn.checkpoint(layer, x)                                        # checked recompute

Tensors are float32, bfloat16 or float16 CPU tensors (one dtype per call; 16-bit ones are
computed with fp32 accumulation and the results rounded once, ring strategy only) in BSHD order
[B, S, H, D] (any strides; no copies are made of strided inputs). Errors raise cpattn.Error (a RuntimeError) whose .code names the kind.
"""

import torch  # noqa: F401  (loads libtorch before the extension module)

from ._cpattn import Error, Workspace, library_version
from ._checkpoint import checkpoint
from ._ops import attention, ring_attention
from ._sharding import shard, unshard
from ._cpattn import memory_stats as _memory_stats

__version__ = library_version()


def memory_stats():
    """Memory cpattn holds in this process: {"live_bytes", "peak_bytes", "live_forward_results",
    "peak_forward_results"} (bytes; counts). A ForwardResult lives while its out or lse tensor
    does (autograd saves them for backward), so after a training step's backward and with the
    outputs dropped, live_forward_results is 0."""
    return _memory_stats()


__all__ = ["Error", "attention", "checkpoint", "memory_stats", "ring_attention", "shard",
           "unshard", "library_version"]
