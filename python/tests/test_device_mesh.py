"""group= as a DeviceMesh: a 1-D mesh is its process group, a 2-D mesh with dims named "ring"
and "ulysses" runs the hybrid strategy (Ulysses over the "ulysses" dim, the ring over "ring").
Each gives the ProcessGroup call's numbers bitwise, and a mesh cpattn cannot serve raises
cpattn.Error naming what is wrong."""

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import cpattn
from helpers import reference_attention, run_processes

S, HEADS, HEAD_DIM = 37, 4, 8


def _whole():
    torch.manual_seed(3)
    return [torch.randn(2, S, HEADS, HEAD_DIM) for _ in range(4)]  # q, k, v, dout


def _run(group, strategy, dropout_p):
    """(out, dq, dk, dv) of this rank's shard, as numpy arrays."""
    q, k, v, dout = (cpattn.shard(t, group=group) for t in _whole())
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    torch.manual_seed(11)
    out = cpattn.ring_attention(q, k, v, group=group, causal=True, dropout_p=dropout_p,
                                strategy=strategy, timeout=60)
    out.backward(dout)
    return [t.detach().numpy() for t in (out, q.grad, k.grad, v.grad)]


def _mesh_vs_group(rank, world, shape, names, strategy):
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    with_mesh = _run(mesh, "hybrid" if len(shape) == 2 else "ring", 0.1)
    with_group = _run(dist.group.WORLD, strategy, 0.1)
    return with_mesh, with_group


@pytest.mark.parametrize("shape,names,strategy", [
    ((4,), ("cp",), "ring"),
    ((2, 2), ("ring", "ulysses"), "hybrid:2x2"),
    ((1, 4), ("ring", "ulysses"), "hybrid:4x1"),
    ((4, 1), ("ring", "ulysses"), "hybrid:1x4"),
])
def test_a_mesh_gives_the_process_group_calls_numbers_bitwise(shape, names, strategy):
    results = run_processes(4, _mesh_vs_group, shape, names, strategy)
    for rank, (with_mesh, with_group) in enumerate(results):
        for a, b in zip(with_mesh, with_group):
            assert np.array_equal(a, b), f"rank {rank}: max |diff| {np.abs(a - b).max()}"


def _hybrid_mesh_vs_reference(rank, world):
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("ring", "ulysses"))
    out, *_ = _run(mesh, "hybrid:2x2", 0.0)
    return out


def test_the_hybrid_over_a_mesh_is_attention_of_the_whole_sequence():
    outs = run_processes(4, _hybrid_mesh_vs_reference)
    q, k, v, _ = _whole()
    ref, _, _ = reference_attention(q, k, v, causal=True)
    for rank, out in enumerate(outs):
        group_index = torch.tensor(
            [int(i) for i in cpattn._sharding._cpattn.shard_token_indices("zigzag", S, 4, rank)])
        want = ref.detach().index_select(1, group_index).numpy()
        assert np.abs(out - want).max() < 1e-5, rank  # fp32 against float64


def _bad_mesh(rank, world, case):
    if case == "3-d":
        mesh = init_device_mesh("cpu", (1, 2, 2), mesh_dim_names=("a", "ring", "ulysses"))
    elif case == "names":
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "cp"))
    elif case == "order":  # ulysses outer: rank order is not ring-major
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("ulysses", "ring"))
    else:  # "strategy": a 2x2 mesh with another hybrid split
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("ring", "ulysses"))
    strategy = "hybrid:4x1" if case == "strategy" else None
    q = torch.randn(1, 8, HEADS, HEAD_DIM)
    try:
        cpattn.ring_attention(q, q, q, group=mesh, strategy=strategy, seq_len=32, timeout=20)
    except cpattn.Error as e:
        return e.code, str(e)
    return None, ""


@pytest.mark.parametrize("case,words", [
    ("3-d", "1 or 2 dims"),
    ("names", "must be named ('ring', 'ulysses')"),
    ("order", "must be the outer one"),
    ("strategy", "runs strategy 'hybrid:2x2'"),
])
def test_a_mesh_cpattn_cannot_serve_is_refused_naming_why(case, words):
    for code, message in run_processes(4, _bad_mesh, case):
        assert code == "invalid_argument", message
        assert words in message, message


def _sdpa_under_context(rank, world):
    """SDPA's output under context_parallel over a 2-D mesh and over the world group with the
    mesh's hybrid named: (mesh's, group's)."""
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("ring", "ulysses"))
    results = []
    for group, strategy in ((mesh, None), (dist.group.WORLD, "hybrid:2x2")):
        q, k, v, _ = (t.transpose(1, 2).contiguous() for t in _whole())  # BHSD
        with cpattn.context_parallel(group, buffers=[q, k, v], seq_dims=[2, 2, 2],
                                     strategy=strategy, timeout=60):
            torch.manual_seed(11)
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.1,
                                                                   is_causal=True)
        results.append(out.numpy())
    return results


def test_context_parallel_over_a_2d_mesh_runs_its_hybrid():
    for rank, (with_mesh, with_group) in enumerate(run_processes(4, _sdpa_under_context)):
        assert np.array_equal(with_mesh, with_group), rank
