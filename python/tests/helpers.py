"""Shared pieces of the cpattn PyTorch tests: the float64 reference (tests/data/float64_attention,
the same independent implementation the known-answer vectors come from) and a runner for
functions on N torch.distributed processes (gloo on CPU)."""

import os
import pathlib
import sys
import queue as queue_module
import tempfile
import time
import traceback

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "data"))
import float64_attention  # noqa: E402

reference = float64_attention


def reference_attention(q, k, v, *, softmax_scale=None, causal=False, window_size=(-1, -1),
                        doc_ids=None, dropout_p=0.0, rng=(0, 0), softcap=0.0, alibi_slopes=None,
                        sink=None, slices=None):
    """float64 attention of float tensors (BSHD, any strides): (out, lse) as float64 tensors that
    autograd differentiates w.r.t. the float64 leaves returned third: (q64, k64, v64), plus
    sink64 when sink (a float tensor [Hq]) is given. slices: (q_begin, q_end, k_begin, k_end,
    type name) tuples."""
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    sink64 = None if sink is None else sink.detach().double().requires_grad_()
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    docs = None if doc_ids is None else doc_ids.tolist()
    slice_dicts = None if slices is None else [
        dict(q_begin=a, q_end=b, k_begin=c, k_end=d, type=t) for a, b, c, d, t in slices]
    out, lse = reference.attention(*leaves, scale, q_doc=docs, k_doc=docs, causal=causal,
                                   window_left=window_size[0], window_right=window_size[1],
                                   dropout_p=dropout_p, seed=rng[0], offset=rng[1],
                                   softcap=softcap, alibi_slopes=alibi_slopes, sink=sink64,
                                   slices=slice_dicts)
    return out, lse, leaves + ([sink64] if sink64 is not None else [])


def rng_after_seed(seed):
    """The (seed, offset) the first cpattn dropout call draws after torch.manual_seed(seed)."""
    torch.manual_seed(seed)
    words = torch.ops.cpattn.draw_rng_state(torch.empty(0), [], 0.5)
    return tuple(int(w) & ((1 << 64) - 1) for w in words)


def _worker(rank, world, store_path, fn, args, queue):
    try:
        dist.init_process_group("gloo", init_method="file://" + store_path, rank=rank,
                                world_size=world)
        torch.set_num_threads(1)
        outcome = (rank, "ok", fn(rank, world, *args))
    except BaseException as e:  # reported to the parent, which fails the test
        outcome = (rank, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
    queue.put(outcome)
    # Flush the queue, then leave at once: this rank's communication is over, and its peers may
    # be gone (a fault test), so the group is not torn down.
    queue.close()
    queue.join_thread()
    os._exit(0 if outcome[1] == "ok" else 1)


def run_processes(world, fn, *args, timeout=240.0, expect_errors=False, start="fork"):
    """Runs fn(rank, world, *args) on `world` processes in one gloo group; returns the results
    by rank (picklable values: use numpy or lists, not tensors). With expect_errors the per-rank
    outcomes ("ok" or "error", value) are returned instead of raising. start: "fork" (fast), or
    "forkserver" for a test module whose process has run autograd already (autograd's threads do
    not survive a fork): the ranks fork from a server process that imported torch, cpattn,
    helpers and fn's module once and never ran autograd, so each rank starts about as fast as a
    fork and as clean as a spawned process (spawn imports torch, cpattn and transformers again in
    every rank, seconds each)."""
    ctx = mp.get_context(start)
    if start == "forkserver":
        # The server starts once per process, at its first use here, with this process's
        # environment and this preload list (one test file's calls all pass functions of that
        # file's module), so the test modules must stay inert to import: no autograd, threads or
        # process groups. Python before 3.12.8 does not give the server this process's sys.path
        # (CPython issue 117378) and skips a preload it cannot import without a word: the tests'
        # folder goes on its PYTHONPATH so that helpers and the test module load there.
        tests_dir = os.path.dirname(os.path.abspath(__file__))
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if tests_dir not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([tests_dir] + paths)
        ctx.set_forkserver_preload(["torch", "cpattn", "helpers", fn.__module__])
    queue = ctx.Queue()
    store = tempfile.mktemp(prefix="cpattn-test-store-")
    procs = [ctx.Process(target=_worker, args=(r, world, store, fn, args, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    outcomes = {}
    deadline = time.monotonic() + timeout
    try:
        # Until every rank reported, or the ranks that did not are gone (a fault test), or the
        # time is up.
        while len(outcomes) < world and time.monotonic() < deadline:
            try:
                rank, status, value = queue.get(timeout=0.5)
                outcomes[rank] = (status, value)
            except queue_module.Empty:
                if not any(p.is_alive() for p in procs):
                    break
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        if os.path.exists(store):
            os.remove(store)
    if expect_errors:
        return [outcomes.get(r, ("missing", None)) for r in range(world)]
    for r in range(world):
        status, value = outcomes.get(r, ("missing", "no report (it died or timed out)"))
        if status != "ok":
            raise AssertionError(f"rank {r} failed: {value}")
    return [outcomes[r][1] for r in range(world)]


def max_rel(a, b, floor=1e-30):
    """max |a - b| / max(max |b|, floor) over finite entries (equal infinities count as 0); the
    floor makes the bound absolute where b is (near) zero, e.g. the exactly-zero gradients of a
    row that sees one key."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    both_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    diff = np.where(both_inf, 0.0, np.abs(a - b))
    scale = np.max(np.abs(b[np.isfinite(b)])) if np.isfinite(b).any() else 1.0
    return float(np.max(diff) / max(scale, floor)) if diff.size else 0.0
