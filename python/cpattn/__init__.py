"""cpattn for PyTorch: exact scaled-dot-product attention, forward and backward, on one rank or
context-parallel over a torch.distributed process group or DeviceMesh (cpattn's C++ ring,
allgather, Ulysses or hybrid strategy), safe under activation checkpointing with dropout, and
traced by torch.compile (torch.library ops cpattn::*). See docs/pytorch.md.

    out = cpattn.attention(q, k, v, causal=True, dropout_p=0.1)            # one rank
    out = cpattn.ring_attention(q_local, k_local, v_local, causal=True)   # this rank's shard
    out = cpattn.sdpa(q, k, v, is_causal=True)                             # SDPA's signature
    out = cpattn.varlen_attention(q, k, v, cu_q, cu_k, max_q, max_k)      # flash-attn varlen
    with cpattn.context_parallel(group, buffers=[ids], seq_dims=[1]):      # SDPA calls under CP
        loss = model(ids).loss
    y = cpattn.checkpoint(layer, x)                                        # checked recompute

Tensors are float32, bfloat16 or float16 CPU tensors (one dtype per call; 16-bit ones are
computed with fp32 accumulation and the results rounded once, ring strategy only) in BSHD order
[B, S, H, D] for attention / ring_attention, BHSD for sdpa (any strides; no copies are made of
strided inputs). Errors raise cpattn.Error (a RuntimeError) whose .code names the kind.
"""

import torch

from . import _build_info


def _check_torch():
    """Refuses a torch older than the minimum, or another release than the one the extension
    was built against, naming both (instead of an undefined-symbol error from the loader)."""
    def major_minor(version):
        return tuple(int(x) for x in version.split("+")[0].split(".")[:2])

    have = torch.__version__
    if major_minor(have) < major_minor(_build_info.MIN_TORCH):
        raise ImportError(f"cpattn needs torch >= {_build_info.MIN_TORCH}, this interpreter has "
                          f"torch {have} (Debian's python3-torch is 1.13: use the project's "
                          f"virtual environment, scripts/setup_python.sh makes .venv/)")
    if major_minor(have) != major_minor(_build_info.TORCH_VERSION):
        raise ImportError(f"cpattn was built against torch {_build_info.TORCH_VERSION}, this "
                          f"interpreter has torch {have}: rebuild it here (pip install . "
                          f"--no-build-isolation)")


_check_torch()

from ._cpattn import Error, Workspace, library_version  # noqa: E402
from ._cpattn import memory_stats as _memory_stats  # noqa: E402
from ._checkpoint import checkpoint  # noqa: E402
from ._ops import (attention, ring_attention, varlen_attention,  # noqa: E402
                   varlen_ring_attention)
from ._sdpa import context_parallel, sdpa  # noqa: E402
from ._sharding import shard, unshard  # noqa: E402

__version__ = library_version()


def memory_stats():
    """Memory cpattn holds in this process: {"live_bytes", "peak_bytes", "live_forward_results",
    "peak_forward_results"} (bytes; counts). A ForwardResult lives while its out or lse tensor
    does (autograd saves them for backward), so after a training step's backward and with the
    outputs dropped, live_forward_results is 0."""
    return _memory_stats()


__all__ = ["Error", "Workspace", "attention", "checkpoint", "context_parallel", "library_version",
           "memory_stats", "ring_attention", "sdpa", "shard", "unshard", "varlen_attention",
           "varlen_ring_attention"]
