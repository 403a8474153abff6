#!/usr/bin/python3
"""Benchmarks of the PyTorch package (figures and commands in docs/performance.md, "PyTorch").

    PYTHONPATH=build/release/python /usr/bin/python3 bench/torch_bench.py [--section NAME] [--reps N]

Sections (each prints a table of medians over --reps interleaved repetitions, as ratios):
  overhead  cpattn.attention forward+backward called from Python (autograd, tensor wrapping,
            fingerprints) vs the C++ kernel's forward+backward on the same tensors, S=4096,
            D=128, Hq=Hkv=8, 2 threads, full and causal. Target: <= 1.05.
  torch     cpattn.attention vs PyTorch 1.13 math attention (softmax(q k^T / sqrt(D)) v with
            autograd), forward+backward, S=4096, D=128, Hq=Hkv=8, 2 threads: time ratio
            (target: torch / cpattn >= 2) and each one's peak RSS (in a fresh process).
  ring      cpattn.ring_attention over gloo with 2 processes (1 thread each) vs cpattn's ring on
            2 in-process ranks (1 thread each), causal zigzag, S=8192, D=128, Hq=Hkv=8,
            forward+backward. Target: <= 1.3.
  strategies  cpattn.ring_attention over gloo with 2 processes (1 thread each), every strategy
            (strategy=...) with and without a cpattn.Workspace kept across the calls, causal
            zigzag, S=8192, D=128, Hq=Hkv=8, forward+backward: medians, ratios (medians of
            each round's ratio) to the ring without a workspace, and each workspace's bytes.
The CPU's vector ISA and the thread counts are printed first.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import cpattn
from cpattn import _cpattn

B, H, D = 1, 8, 128


def isa():
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    wanted = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16"]
    return " ".join(x for x in wanted if x in flags) or "none of " + " ".join(wanted)


def tensors(S, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, S, H, D, generator=g) for _ in range(4)]


def time_cpattn(q, k, v, dout, causal):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    start = time.perf_counter()
    out = cpattn.attention(q, k, v, causal=causal)
    out.backward(dout)
    return time.perf_counter() - start


def time_math(q, k, v, dout, causal):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    start = time.perf_counter()
    s = torch.einsum("bihd,bjhd->bhij", q, k) / D ** 0.5
    if causal:
        n = q.shape[1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.einsum("bhij,bjhd->bihd", torch.softmax(s, dim=-1), v)
    out.backward(dout)
    return time.perf_counter() - start


def medians(fns, reps):
    """Interleaved repetitions (A B A B ...) after one warm-up each: the medians."""
    for fn in fns:
        fn()
    samples = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            samples[i].append(fn())
    return [statistics.median(s) for s in samples]


def section_overhead(reps):
    torch.set_num_threads(2)
    S = 4096
    q, k, v, dout = tensors(S)
    print(f"\n## overhead: cpattn.attention from Python vs the C++ kernel (S={S}, D={D}, "
          f"Hq=Hkv={H}, 2 threads, fwd+bwd, medians of {reps})")
    print("| mask | C++ kernel s | Python s | Python / C++ |\n|---|---|---|---|")
    for causal in (False, True):
        cpp, py = medians([lambda: _cpattn._time_kernel(q, k, v, dout, causal, 2),
                           lambda: time_cpattn(q, k, v, dout, causal)], reps)
        print(f"| {'causal' if causal else 'full'} | {cpp:.3f} | {py:.3f} | {py / cpp:.3f} |")


def vm_hwm_mib():
    """This process's peak resident memory (VmHWM; ru_maxrss would include the parent's peak,
    which a child started by fork + exec inherits)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def peak_rss_mib(which, S, causal):
    """Peak resident memory of a fresh process that runs one forward+backward of `which`."""
    code = (f"import sys, torch; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
            f"import torch_bench as b; torch.set_num_threads(2); t = b.tensors({S}); "
            f"b.time_{which}(*t, {causal}); "
            f"print(b.vm_hwm_mib())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=os.environ, check=True)
    return float(out.stdout.split()[-1])


def section_torch(reps):
    torch.set_num_threads(2)
    S = 4096
    q, k, v, dout = tensors(S)
    print(f"\n## cpattn.attention vs PyTorch {torch.__version__} math attention (S={S}, D={D}, "
          f"Hq=Hkv={H}, 2 threads, fwd+bwd, medians of {reps})")
    print("| mask | math s | cpattn s | math / cpattn | math peak RSS MiB | cpattn peak RSS MiB |\n"
          "|---|---|---|---|---|---|")
    for causal in (False, True):
        m, c = medians([lambda: time_math(q, k, v, dout, causal),
                        lambda: time_cpattn(q, k, v, dout, causal)], reps)
        rss_m, rss_c = peak_rss_mib("math", S, causal), peak_rss_mib("cpattn", S, causal)
        print(f"| {'causal' if causal else 'full'} | {m:.3f} | {c:.3f} | {m / c:.2f} | "
              f"{rss_m:.0f} | {rss_c:.0f} |")
    scores = B * H * S * S * 4 / 2 ** 20
    print(f"(one S x S fp32 score tensor over the heads: {scores:.0f} MiB; the inputs, outputs and "
          f"gradients: {8 * B * S * H * D * 4 / 2 ** 20:.0f} MiB)")


def on_processes(P, worker, *args):
    """Runs worker(rank, P, store, *args, queue) on P forked processes of one gloo group; returns
    what rank 0 put on the queue."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    store = tempfile.mktemp(prefix="cpattn-bench-")
    procs = [ctx.Process(target=worker, args=(r, P, store, *args, queue)) for r in range(P)]
    for p in procs:
        p.start()
    result = queue.get(timeout=3600)
    for p in procs:
        p.join()
    if os.path.exists(store):
        os.remove(store)
    return result


def _ring_worker(rank, world, store, S, reps, queue):
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
    torch.set_num_threads(1)
    q, k, v, dout = (cpattn.shard(t) for t in tensors(S))
    times = []
    for _ in range(reps + 1):
        ql, kl, vl = (t.detach().requires_grad_() for t in (q, k, v))
        dist.barrier()
        start = time.perf_counter()
        out = cpattn.ring_attention(ql, kl, vl, causal=True, seq_len=S)
        out.backward(dout)
        dist.barrier()
        times.append(time.perf_counter() - start)
    if rank == 0:
        queue.put(times[1:])
    dist.destroy_process_group()


def section_ring(reps):
    S, P = 8192, 2
    whole = tensors(S)
    print(f"\n## ring over gloo ({P} processes x 1 thread) vs in-process ring ({P} ranks x 1 thread)"
          f" (S={S}, D={D}, Hq=Hkv={H}, causal zigzag, fwd+bwd, medians of {reps})")
    gloo_times, inproc_times = [], []
    for _ in range(reps):  # interleaved: one in-process run, one gloo run
        inproc_times.append(_cpattn._time_inprocess_ring(*whole, P, True))
        gloo_times.extend(on_processes(P, _ring_worker, S, 1))
    g, i = statistics.median(gloo_times), statistics.median(inproc_times)
    print("| in-process s | gloo s | gloo / in-process |\n|---|---|---|")
    print(f"| {i:.3f} | {g:.3f} | {g / i:.3f} |")


def _strategies_worker(rank, world, store, S, reps, queue):
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
    torch.set_num_threads(1)
    q, k, v, dout = (cpattn.shard(t) for t in tensors(S))
    configs = [(s, w) for s in STRATEGIES for w in (False, True)]
    workspaces = {s: cpattn.Workspace() for s in STRATEGIES}
    times = {c: [] for c in configs}
    for rep in range(reps + 1):  # the first round warms up (and fills the workspaces)
        for strategy, with_ws in configs:
            ql, kl, vl = (t.detach().requires_grad_() for t in (q, k, v))
            dist.barrier()
            start = time.perf_counter()
            out = cpattn.ring_attention(ql, kl, vl, causal=True, seq_len=S, strategy=strategy,
                                        workspace=workspaces[strategy] if with_ws else None)
            out.backward(dout)
            dist.barrier()
            if rep > 0:
                times[(strategy, with_ws)].append(time.perf_counter() - start)
    if rank == 0:
        queue.put((times, {s: w.bytes for s, w in workspaces.items()}))
    dist.destroy_process_group()


STRATEGIES = ["ring", "allgather", "ulysses"]


def section_strategies(reps):
    S, P = 8192, 2
    print(f"\n## strategies over gloo ({P} processes x 1 thread), with and without a "
          f"cpattn.Workspace (S={S}, D={D}, Hq=Hkv={H}, causal zigzag, fwd+bwd, medians of "
          f"{reps} interleaved rounds)")
    times, ws_bytes = on_processes(P, _strategies_worker, S, reps)
    # Ratios are medians of each round's own ratio (runs next to each other), which cancels the
    # host's slow drift between rounds.
    def ratio(a, b):
        return statistics.median(x / y for x, y in zip(times[a], times[b]))

    ring = ("ring", False)
    print("| strategy | s | / ring | with workspace s | / ring | workspace / none | "
          "workspace MiB |\n|---|---|---|---|---|---|---|")
    for s in STRATEGIES:
        a, b = (s, False), (s, True)
        print(f"| {s} | {statistics.median(times[a]):.3f} | {ratio(a, ring):.3f} | "
              f"{statistics.median(times[b]):.3f} | {ratio(b, ring):.3f} | {ratio(b, a):.3f} | "
              f"{ws_bytes[s] / 2 ** 20:.0f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--section", choices=["overhead", "torch", "ring", "strategies", "all"],
                   default="all")
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    print(f"cpattn {cpattn.library_version()}, torch {torch.__version__}, CPU vector ISA: {isa()}, "
          f"{os.cpu_count()} CPUs")
    for name, fn in (("overhead", section_overhead), ("torch", section_torch),
                     ("ring", section_ring), ("strategies", section_strategies)):
        if args.section in (name, "all"):
            fn(args.reps)


if __name__ == "__main__":
    main()
