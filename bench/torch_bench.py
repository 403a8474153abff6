#!.venv/bin/python
"""Benchmarks of the PyTorch package against torch 2.x (figures in docs/performance.md, "PyTorch").

Run from the repository root with the project's virtual environment (torch 2.x; Debian's
/usr/bin/python3 has torch 1.13, which the package refuses):

    PYTHONPATH=build/release/python .venv/bin/python bench/torch_bench.py [--section A,B,...]
        [--reps N] [--reps-large N] [--quick] [--rows REGEX] [--mem-limit-gib G] [--profile]

Every figure is a ratio of interleaved repetitions inside one run (A B, B A, A B, ...: each
round's ratio, then the median of those), since the host is shared and noisy; peak memory is
VmHWM (/proc/self/status) of a fresh subprocess per implementation and case, reset to the
current RSS (/proc/self/clear_refs) after the imports, the inputs and a small warm-up call,
so "+call" is what the call itself added. B = 1, Hq = 8 everywhere.

Sections (default: all, in this order):
  sdpa        cpattn.sdpa vs torch.nn.functional.scaled_dot_product_attention forced to torch's
              CPU flash kernel (sdpa_kernel(FLASH_ATTENTION)), BHSD inputs, forward (no grad) and
              forward+backward, fp32 and bf16, S 4096 and 16384, D 128, Hkv 8 and 2
              (enable_gqa=True), causal and full, 2 threads: time torch / cpattn (target >= 1.3)
              and each one's peak memory. S = 16384 runs --reps-large repetitions (default 1:
              then the time is the fresh subprocess's single call, torch and cpattn in turn).
              --rows REGEX runs only the rows whose "pass dtype S Hkv mask" it finds.
  dropout     dropout_p 0.1, fp32 and bf16, fwd+bwd, S 4096, 2 threads: torch's SDPA falls back
              to its math path (its fused kernels take no dropout): time ratio (target >= 5),
              peak memory ratio (target <= 1/10); then the smallest S of 4096, 8192, 16384,
              32768 at which torch runs out of memory under RLIMIT_AS = --mem-limit-gib and
              cpattn does not (fp32, a training-mode forward only, for both: cpattn's fwd+bwd
              at 32768 takes minutes on 2 cores).
  cp          torch.distributed.tensor.experimental.context_parallel vs cpattn.context_parallel
              on CPU/gloo, P = 2 and 4 processes x 1 thread: a 2-block causal model (E 512,
              Hq 8, D 64, S 2048) whose SDPA calls run context-parallel; time of a training
              step and the parameter gradients' error against one process, dropout 0 and 0.1.
              torch's CP does not run on CPU: the table records its exact error.
  cp_overhead cpattn.context_parallel (F.scaled_dot_product_attention under the context, one
              buffer sharded) vs cpattn.ring_attention on the same shards, P = 2 gloo x 1
              thread, S 8192, D 128, causal zigzag, fwd+bwd (target <= 1.05).
  compile     torch.compile(fullgraph=True) of a 2-block model calling cpattn.attention vs the
              same model eager, a training step (fwd, bwd, SGD step), S 4096, E 1024, 2 threads,
              dropout 0 and 0.1 (target: compiled / eager <= 1.0); with --profile, also where
              one step's time goes, eager and compiled (matrix products, cpattn's ops, the rest).
  overhead    cpattn.attention from Python (autograd, custom ops, fingerprints) vs the C++
              kernel's forward+backward on the same tensors (_cpattn._time_kernel), S 4096,
              D 128, Hkv 8, 2 threads, full and causal (target <= 1.05).
  ring        cpattn.ring_attention over gloo (2 processes x 1 thread) vs cpattn's ring on 2
              in-process ranks x 1 thread (_cpattn._time_inprocess_ring, run by rank 0 between
              the gloo calls), causal zigzag, S 8192, D 128 (target <= 1.3).
  strategies  cpattn.ring_attention over gloo (2 processes x 1 thread), every strategy with
              and without a cpattn.Workspace kept across the calls, causal zigzag, S 8192.
The machine (CPU model, ISA flags, cpattn's kernel ISA, torch's CPU capability and AMX), torch
version, threads and the load average are printed first; the load average again after each
section.
"""

import argparse
import contextlib
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import cpattn
from cpattn import _cpattn

HQ = 8
THREADS = 2
HERE = os.path.abspath(__file__)

# --------------------------------------------------------------------------------------------
# The machine.


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpuinfo():
    """(model name, "family 0x.. model 0x..", the vector ISA flags of interest)."""
    fields = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if not line.strip():
                break
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    flags = set(fields.get("flags", "").split())
    wanted = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16",
              "amx_tile", "amx_bf16"]
    fam = f"family {int(fields.get('cpu family', 0)):#x} model {int(fields.get('model', 0)):#x}"
    return (fields.get("model name", platform.processor()), fam,
            " ".join(x for x in wanted if x in flags) or "none of " + " ".join(wanted))


def cpattn_kernel_isa():
    """What `cpattn --version` says about the kernel's ISA (the binary next to the package's
    build directory), or why it is unknown."""
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(cpattn.__file__))))
    exe = os.path.join(build, "cpattn")
    if not os.path.exists(exe):
        return f"unknown ({exe} not built)"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    start = out.find("kernel ISA")
    return out[start:].rstrip(")") if start >= 0 else out


def mem_available_gib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2 ** 20
    return float("nan")


def print_machine():
    model, fam, flags = cpuinfo()
    amx = torch.cpu._is_amx_tile_supported() if hasattr(torch.cpu, "_is_amx_tile_supported") \
        else "unknown"
    print(f"CPU: {model} ({fam}), {os.cpu_count()} logical CPUs; ISA flags: {flags}")
    print(f"cpattn {cpattn.library_version()}: {cpattn_kernel_isa()}")
    print(f"torch {torch.__version__}: CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"AMX tiles usable by torch: {amx}, threads (default) {torch.get_num_threads()}")
    print(f"load average: {loadavg()}; MemAvailable {mem_available_gib():.1f} GiB")


# --------------------------------------------------------------------------------------------
# Timing and memory.


def interleaved(fns, reps, warmup=True):
    """Runs each fn (returning seconds) once to warm up, then `reps` rounds, the order reversed
    every other round. Returns the samples of each fn, by round."""
    if warmup:
        for fn in fns:
            fn()
    samples = [[] for _ in fns]
    for r in range(reps):
        order = list(range(len(fns)))
        if r % 2:
            order.reverse()
        for i in order:
            samples[i].append(fns[i]())
    return samples


def paired_ratio(a, b):
    """Median over rounds of a[i] / b[i]."""
    return statistics.median(x / y for x, y in zip(a, b))


def status_kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/self/status")


def reset_hwm():
    """Resets VmHWM to the current RSS (Linux >= 4.0); False where refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def child(spec):
    """Runs in a fresh subprocess (see run_child): one call of spec["impl"] on the case, its
    time and VmHWM, printed as one JSON line."""
    torch.set_num_threads(spec.get("threads", THREADS))
    case = dict(spec["case"])
    tensors = make_bhsd(**case)
    small = make_bhsd(**dict(case, S=256))
    run_call(spec["impl"], small, spec["causal"], spec["dropout_p"], spec["backward"],
             spec.get("train_forward", False))
    base = status_kib("VmRSS")
    reset = reset_hwm()
    if spec.get("limit_gib"):
        lim = int(spec["limit_gib"] * 2 ** 30)
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    result = {"base_mib": base / 1024, "vmsize_mib": status_kib("VmSize") / 1024,
              "hwm_reset": reset}
    try:
        result["time"] = run_call(spec["impl"], tensors, spec["causal"], spec["dropout_p"],
                                  spec["backward"], spec.get("train_forward", False))
        result["ok"] = True
    except (RuntimeError, MemoryError) as e:
        result["ok"] = False
        result["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    result["hwm_mib"] = status_kib("VmHWM") / 1024
    print("RESULT " + json.dumps(result), flush=True)


def run_child(impl, case, causal, dropout_p, backward, train_forward=False, limit_gib=None):
    """One call in a fresh interpreter: {"ok", "time", "hwm_mib", "base_mib", ...}."""
    spec = dict(impl=impl, case=case, causal=causal, dropout_p=dropout_p, backward=backward,
                train_forward=train_forward, limit_gib=limit_gib, threads=THREADS)
    p = subprocess.run([sys.executable, HERE, "--child", json.dumps(spec)], capture_output=True,
                       text=True, env=os.environ)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return {"ok": False, "error": f"subprocess exit {p.returncode}: {tail[:200]}",
            "hwm_mib": float("nan"), "base_mib": float("nan")}


# --------------------------------------------------------------------------------------------
# One attention call on BHSD tensors (the sdpa and dropout sections).

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def make_bhsd(S, hkv, dtype, D=128, seed=0):
    """q, k, v, dout in `dtype` (drawn in it: no freed fp32 temporaries for the measured call's
    allocations to reuse, which would hide them from VmHWM)."""
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]
    return tuple(torch.randn(1, h, S, D, generator=g, dtype=dt) for h in (HQ, hkv, hkv, HQ))


def run_call(impl, tensors, causal, dropout_p, backward, train_forward=False):
    """Seconds of one call: impl "torch" is F.scaled_dot_product_attention (forced to the
    flash kernel when dropout_p == 0; with dropout torch picks its math path itself), "cpattn"
    is cpattn.sdpa. backward: forward + backward; else a forward, with autograd recording when
    train_forward (the memory a training forward keeps), under no_grad otherwise."""
    q, k, v, dout = tensors
    gqa = q.shape[1] != k.shape[1]
    grad = backward or train_forward
    if grad:
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    backend = sdpa_kernel([SDPBackend.FLASH_ATTENTION]) if impl == "torch" and dropout_p == 0 \
        else contextlib.nullcontext()
    fn = F.scaled_dot_product_attention if impl == "torch" else cpattn.sdpa
    start = time.perf_counter()
    with backend, torch.set_grad_enabled(grad):
        out = fn(q, k, v, dropout_p=dropout_p, is_causal=causal, enable_gqa=gqa)
        if backward:
            out.backward(dout)
    return time.perf_counter() - start


def mib(r):
    return f"{r['hwm_mib']:.0f} (+{r['hwm_mib'] - r['base_mib']:.0f})" if r.get("ok") else "-"


SINGLE = "fresh-process call each, torch and cpattn in turn"


def section_sdpa(args):
    torch.set_num_threads(THREADS)
    sizes = (512, 1024) if args.quick else (4096, 16384)
    large = sizes[-1]
    print(f"\n## sdpa: torch's CPU flash SDPA vs cpattn.sdpa (D=128, Hq={HQ}, {THREADS} threads; "
          f"S={sizes[0]}: medians of {args.reps} interleaved rounds after a warm-up, ratio = "
          f"median of the rounds' ratios; S={large}: {args.reps_large} "
          f"{SINGLE if args.reps_large == 1 else 'rounds'}"
          f"). Peak MiB: VmHWM of a fresh process, (+ what the call added). Target torch / "
          f"cpattn >= 1.3")
    print("| pass | dtype | S | Hkv | mask | torch s | cpattn s | torch / cpattn | "
          "torch peak MiB | cpattn peak MiB | >= 1.3 |\n" + "|---" * 11 + "|")
    row = 0
    for backward in (False, True):
        for dtype in ("fp32", "bf16"):
            for S in sizes:
                for hkv in (8, 2):
                    for causal in (False, True):
                        label = (f"{'fwd+bwd' if backward else 'fwd'} {dtype} {S} {hkv} "
                                 f"{'causal' if causal else 'full'}")
                        if not re.search(args.rows, label):
                            continue
                        case = dict(S=S, hkv=hkv, dtype=dtype)
                        order = ("torch", "cpattn") if row % 2 == 0 else ("cpattn", "torch")
                        row += 1
                        mem = {impl: run_child(impl, case, causal, 0.0, backward)
                               for impl in order}
                        if S == large and args.reps_large == 1:
                            if not (mem["torch"]["ok"] and mem["cpattn"]["ok"]):
                                ts = tc = ratio = float("nan")
                            else:
                                ts, tc = mem["torch"]["time"], mem["cpattn"]["time"]
                                ratio = ts / tc
                        else:
                            t = make_bhsd(**case)
                            reps = args.reps if S != large else args.reps_large
                            a, b = interleaved(
                                [lambda: run_call("torch", t, causal, 0.0, backward),
                                 lambda: run_call("cpattn", t, causal, 0.0, backward)], reps)
                            ts, tc, ratio = statistics.median(a), statistics.median(b), \
                                paired_ratio(a, b)
                            del t
                        print(f"| {'fwd+bwd' if backward else 'fwd'} | {dtype} | {S} | {hkv} | "
                              f"{'causal' if causal else 'full'} | {ts:.3f} | {tc:.3f} | "
                              f"{ratio:.2f} | {mib(mem['torch'])} | {mib(mem['cpattn'])} | "
                              f"{'yes' if ratio >= 1.3 else 'no'} |", flush=True)


def section_dropout(args):
    torch.set_num_threads(THREADS)
    S = 1024 if args.quick else 4096
    p = 0.1
    print(f"\n## dropout: dropout_p={p}, fwd+bwd, S={S}, Hq=Hkv={HQ}, D=128, {THREADS} "
          f"threads: torch's SDPA (its math path: the fused kernels take no dropout) vs "
          f"cpattn.sdpa, medians of {args.reps} interleaved rounds. Peak: VmHWM of a fresh "
          f"process (+ what the call added); memory ratio = cpattn's added / torch's added. "
          f"Targets: time >= 5, memory <= 0.1")
    print("| dtype | mask | torch s | cpattn s | torch / cpattn | torch peak MiB | "
          "cpattn peak MiB | cpattn / torch memory (+call) | time >= 5 | memory <= 0.1 |\n"
          "|---|---|---|---|---|---|---|---|---|---|")
    for dtype in ("fp32", "bf16"):
        case = dict(S=S, hkv=HQ, dtype=dtype)
        t = make_bhsd(**case)
        for causal in (False, True):
            mem = {impl: run_child(impl, case, causal, p, True) for impl in ("torch", "cpattn")}
            a, b = interleaved([lambda: run_call("torch", t, causal, p, True),
                                lambda: run_call("cpattn", t, causal, p, True)], args.reps)
            ratio = paired_ratio(a, b)
            added = [mem[i]["hwm_mib"] - mem[i]["base_mib"] for i in ("torch", "cpattn")]
            mratio = added[1] / added[0]
            print(f"| {dtype} | {'causal' if causal else 'full'} | {statistics.median(a):.3f} | "
                  f"{statistics.median(b):.3f} | {ratio:.2f} | {mib(mem['torch'])} | "
                  f"{mib(mem['cpattn'])} | {mratio:.4f} | {'yes' if ratio >= 5 else 'no'} | "
                  f"{'yes' if mratio <= 0.1 else 'no'} |", flush=True)
        del t

    limit = args.mem_limit_gib
    avail = mem_available_gib()
    if avail - 2 < limit:  # never let the probe take the memory other work on the host needs
        print(f"(MemAvailable {avail:.1f} GiB: the limit drops from {limit} to "
              f"{max(avail - 2, 4):.1f} GiB)")
        limit = max(avail - 2, 4)
    sizes = (1024, 2048) if args.quick else (4096, 8192, 16384, 32768)
    print(f"\nOut-of-memory probe: RLIMIT_AS = {limit:.1f} GiB set in a fresh process after its "
          f"imports and inputs (VmSize then: see the column), one training-mode forward "
          f"(autograd recording, dropout_p={p}, full mask, fp32, Hq=Hkv={HQ}, D=128); cpattn "
          f"runs where torch fails")
    print("| S | VmSize at the limit MiB | torch | cpattn |\n|---|---|---|---|")
    found = None
    for S in sizes:
        case = dict(S=S, hkv=HQ, dtype="fp32")
        rt = run_child("torch", case, False, p, False, train_forward=True, limit_gib=limit)
        rc = run_child("cpattn", case, False, p, False, train_forward=True,
                       limit_gib=limit) if not rt["ok"] else None

        def say(r):
            if r is None:
                return "(not run)"
            if r["ok"]:
                return f"ok, {r['time']:.2f} s, peak {mib(r)} MiB"
            return r["error"]
        print(f"| {S} | {rt.get('vmsize_mib', float('nan')):.0f} | {say(rt)} | {say(rc)} |",
              flush=True)
        if not rt["ok"] and rc is not None and rc["ok"]:
            found = S
            break
    print(f"smallest S where torch runs out of memory and cpattn does not: "
          f"{found if found else 'none up to ' + str(sizes[-1])}")


# --------------------------------------------------------------------------------------------
# Processes of one gloo group (spawned: autograd's and OpenMP's threads do not survive a fork).


def on_processes(P, worker, *args):
    """Runs the function named `worker`, (rank, P, store, queue, *args), on P spawned processes
    of one gloo group; returns what rank 0 puts on the queue."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    fd, store = tempfile.mkstemp(prefix="cpattn-bench-")
    os.close(fd)
    os.remove(store)
    procs = [ctx.Process(target=_worker, args=(r, P, store, queue, worker, *args))
             for r in range(P)]
    for p in procs:
        p.start()
    try:
        result = queue.get(timeout=3600)
    finally:
        for p in procs:
            p.join(timeout=600)
        if os.path.exists(store):
            os.remove(store)
    if isinstance(result, dict) and "worker_error" in result:
        raise RuntimeError("worker failed:\n" + result["worker_error"])
    return result


def _init(rank, P, store, threads=1):
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=P)
    torch.set_num_threads(threads)


def _worker(rank, P, store, queue, body, *args):
    """A spawned process: runs globals()[body](rank, P, store, queue, *args); a failure on rank
    0 goes back on the queue as text."""
    try:
        globals()[body](rank, P, store, queue, *args)
    except Exception:
        if rank == 0:
            queue.put({"worker_error": traceback.format_exc()})
        raise


def tensors_bshd(S, D=128, hkv=HQ, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, S, HQ, D, generator=g), torch.randn(1, S, hkv, D, generator=g),
            torch.randn(1, S, hkv, D, generator=g), torch.randn(1, S, HQ, D, generator=g))


# --------------------------------------------------------------------------------------------
# cp: torch's context_parallel vs cpattn's.

CP_E, CP_D = 512, 64


class CpBlock(torch.nn.Module):
    """x + proj(SDPA(qkv(ln1 x))), then x + mlp(ln2 x); the SDPA call is what a CP context
    takes over."""

    def __init__(self, dropout_p):
        super().__init__()
        self.dropout_p = dropout_p
        self.ln1, self.ln2 = torch.nn.LayerNorm(CP_E), torch.nn.LayerNorm(CP_E)
        self.qkv = torch.nn.Linear(CP_E, 3 * CP_E)
        self.proj = torch.nn.Linear(CP_E, CP_E)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(CP_E, 2 * CP_E), torch.nn.GELU(),
                                       torch.nn.Linear(2 * CP_E, CP_E))

    def forward(self, x):
        b, s, e = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, HQ, CP_D).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout_p, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, e))
        return x + self.mlp(self.ln2(x))


def cp_model(dropout_p):
    torch.manual_seed(1)
    return torch.nn.Sequential(CpBlock(dropout_p), CpBlock(dropout_p))


def _cp_step(model, x, w, ctx):
    """One training step's forward + backward under `ctx`; its seconds."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)  # every rank draws the same dropout state
    start = time.perf_counter()
    with ctx():
        loss = (model(x) * w).sum()
        loss.backward()
    return time.perf_counter() - start


def _grads(model):
    return [p.grad.detach().clone() for p in model.parameters()]


def _rel_err(got, ref):
    scale = max(r.abs().max().item() for r in ref)
    return max((g - r).abs().max().item() for g, r in zip(got, ref)) / scale


def _cp_body(rank, P, store, queue, S, reps):
    _init(rank, P, store)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel as torch_cp
    mesh = init_device_mesh("cpu", (P,))
    group = dist.group.WORLD
    g = torch.Generator().manual_seed(3)
    x_whole = torch.randn(1, S, CP_E, generator=g)
    w_whole = torch.randn(1, S, CP_E, generator=g)
    results = {}
    for dropout_p in (0.0, 0.1):
        model = cp_model(dropout_p)
        # One process, the whole sequence: torch's SDPA without dropout; with dropout, cpattn's
        # (its masks are the ones cp=N must reproduce; torch's are other random numbers).
        ref_ctx = (contextlib.nullcontext if dropout_p == 0 else
                   (lambda: cpattn.context_parallel(None)))
        one = [_cp_step(model, x_whole, w_whole, ref_ctx) for _ in range(2)][-1]
        ref = _grads(model)
        impls = {
            "torch": lambda: torch_cp(mesh, buffers=[x, w], buffer_seq_dims=[1, 1]),
            "torch (SDPBackend.MATH)": lambda: _stack(
                sdpa_kernel([SDPBackend.MATH]),
                torch_cp(mesh, buffers=[x, w], buffer_seq_dims=[1, 1])),
            "cpattn": lambda: cpattn.context_parallel(group, buffers=[x, w], seq_dims=[1, 1]),
        }
        for name, ctx in impls.items():
            x, w = x_whole.clone(), w_whole.clone()
            times = []
            try:
                for _ in range(reps + 1):
                    dist.barrier()
                    times.append(_cp_step(model, x, w, ctx))
                    dist.barrier()
                got = _grads(model)
                for t in got:
                    dist.all_reduce(t)
                err = _rel_err(got, ref) if (dropout_p == 0 or name == "cpattn") else None
                results[(name, dropout_p)] = dict(ok=True, time=statistics.median(times[1:]),
                                                  err=err, one=one)
            except Exception as e:
                results[(name, dropout_p)] = dict(
                    ok=False, one=one,
                    error=f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
                dist.barrier()
    if rank == 0:
        queue.put(results)
    dist.destroy_process_group()


@contextlib.contextmanager
def _stack(*managers):
    with contextlib.ExitStack() as stack:
        for m in managers:
            stack.enter_context(m)
        yield



def section_cp(args):
    S = 256 if args.quick else 2048
    print(f"\n## cp: torch.distributed.tensor.experimental.context_parallel vs "
          f"cpattn.context_parallel, CPU/gloo, P processes x 1 thread (2 cores), 2-block causal "
          f"model (E={CP_E}, Hq={HQ}, D={CP_D}), S={S}, buffers = input and loss weights "
          f"(seq dim 1); a training step's fwd+bwd, median of {args.reps} after a warm-up; "
          f"gradient error = max |g_cp - g_one| / max |g_one| over the parameters (gradients "
          f"summed over the ranks), against one process with the whole sequence (torch's SDPA "
          f"without dropout, cpattn.sdpa with dropout: the same masks)")
    print("| P | dropout | implementation | step s | one process s (1 thread) | gradient error | "
          "result |\n|---|---|---|---|---|---|---|")
    for P in (2, 4):
        results = on_processes(P, "_cp_body", S, args.reps)
        for (name, dropout_p), r in results.items():
            if r["ok"]:
                err = f"{r['err']:.2e}" if r["err"] is not None else "n/a (other dropout masks)"
                print(f"| {P} | {dropout_p} | {name} | {r['time']:.3f} | {r['one']:.3f} | {err} "
                      f"| runs |", flush=True)
            else:
                print(f"| {P} | {dropout_p} | {name} | - | {r['one']:.3f} | - | "
                      f"`{r['error']}` |", flush=True)


# --------------------------------------------------------------------------------------------
# cp_overhead: cpattn.context_parallel vs cpattn.ring_attention.


def _cp_overhead_body(rank, P, store, queue, S, reps):
    _init(rank, P, store)
    group = dist.group.WORLD
    q, k, v, dout = (cpattn.shard(t) for t in tensors_bshd(S))
    pos = torch.arange(S).unsqueeze(0)

    def under_context():
        ql, kl, vl = (t.detach().requires_grad_() for t in (q, k, v))
        dist.barrier()
        start = time.perf_counter()
        with cpattn.context_parallel(group, buffers=[pos], seq_dims=[1]):
            out = F.scaled_dot_product_attention(ql.transpose(1, 2), kl.transpose(1, 2),
                                                 vl.transpose(1, 2), is_causal=True)
            out.backward(dout.transpose(1, 2))
        dist.barrier()
        return time.perf_counter() - start

    def direct():
        ql, kl, vl = (t.detach().requires_grad_() for t in (q, k, v))
        dist.barrier()
        start = time.perf_counter()
        out = cpattn.ring_attention(ql, kl, vl, causal=True, seq_len=S)
        out.backward(dout)
        dist.barrier()
        return time.perf_counter() - start

    a, b = interleaved([under_context, direct], reps)
    if rank == 0:
        queue.put((a, b))
    dist.destroy_process_group()



def section_cp_overhead(args):
    S, P = (1024 if args.quick else 8192), 2
    print(f"\n## cp_overhead: cpattn.context_parallel (SDPA under the context, one buffer "
          f"sharded, its entry and exit agreements included) vs cpattn.ring_attention on the "
          f"same shards, {P} gloo processes x 1 thread, S={S}, D=128, Hq=Hkv={HQ}, causal "
          f"zigzag, fwd+bwd, {args.reps} interleaved rounds. Target <= 1.05")
    a, b = on_processes(P, "_cp_overhead_body", S, args.reps)
    print("| ring_attention s | context_parallel s | context / ring (median of rounds) | "
          "<= 1.05 |\n|---|---|---|---|")
    r = paired_ratio(a, b)
    print(f"| {statistics.median(b):.3f} | {statistics.median(a):.3f} | {r:.3f} | "
          f"{'yes' if r <= 1.05 else 'no'} |")


# --------------------------------------------------------------------------------------------
# compile: a compiled training step vs eager.

C_E, C_D = 1024, 128


class CompileBlock(torch.nn.Module):
    def __init__(self, dropout_p):
        super().__init__()
        self.dropout_p = dropout_p
        self.ln1, self.ln2 = torch.nn.LayerNorm(C_E), torch.nn.LayerNorm(C_E)
        self.qkv = torch.nn.Linear(C_E, 3 * C_E, bias=False)
        self.proj = torch.nn.Linear(C_E, C_E, bias=False)
        self.w1 = torch.nn.Linear(C_E, 2 * C_E, bias=False)
        self.w2 = torch.nn.Linear(2 * C_E, C_E, bias=False)

    def forward(self, x):
        b, s, e = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, HQ, C_D).unbind(2)
        a = cpattn.attention(q, k, v, causal=True, dropout_p=self.dropout_p)
        x = x + self.proj(a.reshape(b, s, e))
        return x + self.w2(F.gelu(self.w1(self.ln2(x))))


def section_compile(args):
    torch.set_num_threads(THREADS)
    S = 512 if args.quick else 4096
    print(f"\n## compile: torch.compile(fullgraph=True) of a 2-block model calling "
          f"cpattn.attention (E={C_E}, Hq={HQ}, D={C_D}, causal) vs eager, a training step "
          f"(zero_grad, fwd, loss, bwd, SGD step), S={S}, {THREADS} threads, {args.reps} "
          f"interleaved rounds after the compile and a warm-up. Target compiled / eager <= 1.0")
    print("| dropout | compile s | eager s | compiled s | compiled / eager (median of rounds) | "
          "<= 1.0 |\n|---|---|---|---|---|---|")
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, S, C_E, generator=g)
    if args.profile:
        torch._inductor.config.cpp.enable_kernel_profile = True
    profiles = []
    for dropout_p in (0.0, 0.1):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = torch.nn.Sequential(CompileBlock(dropout_p), CompileBlock(dropout_p))
        compiled = torch.compile(model, fullgraph=True)
        opt = torch.optim.SGD(model.parameters(), lr=1e-6)

        def step(m):
            opt.zero_grad(set_to_none=True)
            start = time.perf_counter()
            m(x).square().mean().backward()
            opt.step()
            return time.perf_counter() - start
        start = time.perf_counter()
        step(compiled)
        t_compile = time.perf_counter() - start
        a, b = interleaved([lambda: step(model), lambda: step(compiled)], args.reps)
        r = paired_ratio(b, a)
        print(f"| {dropout_p} | {t_compile:.1f} | {statistics.median(a):.3f} | "
              f"{statistics.median(b):.3f} | {r:.3f} | {'yes' if r <= 1.0 else 'no'} |",
              flush=True)
        if args.profile:
            profiles.append((dropout_p, step_profile(step, model), step_profile(step, compiled)))
    for dropout_p, eager, comp in profiles:
        print(f"\nWhere a step's time goes, dropout {dropout_p} (torch.profiler over 3 steps, "
              f"self CPU s per step; compiled kernels named by inductor's "
              f"cpp.enable_kernel_profile)\n"
              f"| kind | eager s | compiled s |\n|---|---|---|")
        for kind in ("matrix products", "cpattn ops", "the rest", "total"):
            print(f"| {kind} | {eager[kind]:.3f} | {comp[kind]:.3f} |")
        for name, times in (("eager", eager), ("compiled", comp)):
            top = ", ".join(f"{k} {t * 1e3:.1f} ms" for k, t in times["top of the rest"])
            print(f"{name}, the rest's largest: {top}")


def step_profile(step, model, steps=3):
    """Training steps under torch.profiler: self CPU seconds per step of the matrix products
    (aten::mm and kin), of cpattn's ops (every record naming cpattn) and of the rest (elementwise
    kernels: ATen's eager, inductor's compiled, and the Python around them), with the rest's five
    largest records."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step(model)
    kinds = {"matrix products": 0.0, "cpattn ops": 0.0, "the rest": 0.0}
    rest = []
    for e in prof.key_averages():
        seconds = e.self_cpu_time_total / 1e6 / steps
        if "cpattn" in e.key:
            kinds["cpattn ops"] += seconds
        elif e.key in ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear"):
            kinds["matrix products"] += seconds
        else:
            kinds["the rest"] += seconds
            rest.append((e.key[:48], seconds))
    kinds["total"] = sum(kinds.values())
    return kinds | {"top of the rest": sorted(rest, key=lambda r: -r[1])[:5]}


# --------------------------------------------------------------------------------------------
# overhead: Python vs the C++ kernel.


def time_attention(q, k, v, dout, causal):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    start = time.perf_counter()
    cpattn.attention(q, k, v, causal=causal).backward(dout)
    return time.perf_counter() - start


def section_overhead(args):
    torch.set_num_threads(THREADS)
    S = 1024 if args.quick else 4096
    q, k, v, dout = tensors_bshd(S)
    print(f"\n## overhead: cpattn.attention from Python vs the C++ kernel (S={S}, D=128, "
          f"Hq=Hkv={HQ}, {THREADS} threads, fwd+bwd, {args.reps} interleaved rounds). "
          f"Target <= 1.05")
    print("| mask | C++ kernel s | Python s | Python / C++ (median of rounds) | <= 1.05 |\n"
          "|---|---|---|---|---|")
    for causal in (False, True):
        cpp, py = interleaved([lambda: _cpattn._time_kernel(q, k, v, dout, causal, THREADS),
                               lambda: time_attention(q, k, v, dout, causal)], args.reps)
        r = paired_ratio(py, cpp)
        print(f"| {'causal' if causal else 'full'} | {statistics.median(cpp):.3f} | "
              f"{statistics.median(py):.3f} | {r:.3f} | {'yes' if r <= 1.05 else 'no'} |",
              flush=True)


# --------------------------------------------------------------------------------------------
# ring: gloo vs in-process ranks.


def _ring_body(rank, P, store, queue, S, reps):
    _init(rank, P, store)
    whole = tensors_bshd(S)
    q, k, v, dout = (cpattn.shard(t) for t in whole)

    def gloo():
        ql, kl, vl = (t.detach().requires_grad_() for t in (q, k, v))
        dist.barrier()
        start = time.perf_counter()
        cpattn.ring_attention(ql, kl, vl, causal=True, seq_len=S).backward(dout)
        dist.barrier()
        return time.perf_counter() - start

    def inprocess():  # rank 0 runs P in-process ranks (1 thread each); the others wait
        dist.barrier()
        t = _cpattn._time_inprocess_ring(*whole, P, True) if rank == 0 else 0.0
        dist.barrier()
        return t

    a, b = interleaved([gloo, inprocess], reps)
    if rank == 0:
        queue.put((a, b))
    dist.destroy_process_group()



def section_ring(args):
    S, P = (1024 if args.quick else 8192), 2
    print(f"\n## ring: gloo ({P} processes x 1 thread) vs in-process ring ({P} ranks x 1 "
          f"thread, run by rank 0 between the gloo calls), S={S}, D=128, Hq=Hkv={HQ}, causal "
          f"zigzag, fwd+bwd, {args.reps} interleaved rounds. Target <= 1.3")
    a, b = on_processes(P, "_ring_body", S, args.reps)
    r = paired_ratio(a, b)
    print("| in-process s | gloo s | gloo / in-process (median of rounds) | <= 1.3 |\n"
          "|---|---|---|---|")
    print(f"| {statistics.median(b):.3f} | {statistics.median(a):.3f} | {r:.3f} | "
          f"{'yes' if r <= 1.3 else 'no'} |")


# --------------------------------------------------------------------------------------------
# strategies.

STRATEGIES = ["ring", "allgather", "ulysses"]


def _strategies_body(rank, P, store, queue, S, reps):
    _init(rank, P, store)
    q, k, v, dout = (cpattn.shard(t) for t in tensors_bshd(S))
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



def section_strategies(args):
    S, P = (1024 if args.quick else 8192), 2
    print(f"\n## strategies: gloo ({P} processes x 1 thread), with and without a "
          f"cpattn.Workspace, S={S}, D=128, Hq=Hkv={HQ}, causal zigzag, fwd+bwd, {args.reps} "
          f"rounds each running the six in turn; ratios are medians of the rounds' ratios")
    times, ws_bytes = on_processes(P, "_strategies_body", S, args.reps)
    ring = ("ring", False)
    print("| strategy | s | / ring | with workspace s | / ring | workspace / none | "
          "workspace MiB |\n|---|---|---|---|---|---|---|")
    for s in STRATEGIES:
        a, b = (s, False), (s, True)
        print(f"| {s} | {statistics.median(times[a]):.3f} | "
              f"{paired_ratio(times[a], times[ring]):.3f} | {statistics.median(times[b]):.3f} | "
              f"{paired_ratio(times[b], times[ring]):.3f} | "
              f"{paired_ratio(times[b], times[a]):.3f} | {ws_bytes[s] / 2 ** 20:.0f} |")


# --------------------------------------------------------------------------------------------

SECTIONS = {"sdpa": section_sdpa, "dropout": section_dropout, "cp": section_cp,
            "cp_overhead": section_cp_overhead, "compile": section_compile,
            "overhead": section_overhead, "ring": section_ring,
            "strategies": section_strategies}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--section", default="all",
                   help="comma-separated of: all, " + ", ".join(SECTIONS))
    p.add_argument("--reps", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--reps-large", type=int, default=1,
                   help="rounds of the sdpa section's S=16384 rows (default 1)")
    p.add_argument("--quick", action="store_true", help="a smoke run at small S, 1 round")
    p.add_argument("--rows", default="",
                   help="the sdpa section runs only the rows whose 'pass dtype S Hkv mask' "
                        "(e.g. 'fwd fp32 4096 8 full') this regular expression finds")
    p.add_argument("--profile", action="store_true",
                   help="the compile section also profiles one step of each, eager and compiled")
    p.add_argument("--mem-limit-gib", type=float, default=16.0,
                   help="RLIMIT_AS of the dropout section's out-of-memory probe (default 16; "
                        "lowered to MemAvailable - 2 GiB where less is free)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    if args.quick:
        args.reps, args.reps_large = 1, 1
    chosen = list(SECTIONS) if args.section == "all" else args.section.split(",")
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown:
        p.error(f"unknown sections {unknown}: choose from {list(SECTIONS)}")
    print(f"$ {' '.join(sys.argv)}")
    print_machine()
    for name in chosen:
        start = time.perf_counter()
        SECTIONS[name](args)
        print(f"({name}: {time.perf_counter() - start:.0f} s; load average after: {loadavg()})",
              flush=True)


if __name__ == "__main__":
    main()
