#!/usr/bin/env python3
"""The byte-level model of `cpattn train` (docs/train.md) written in PyTorch, its attention
cpattn.ring_attention over a torch.distributed group (gloo, one process per rank) with every
layer under cpattn.checkpoint (--no-recompute: none) and one cpattn.Workspace for all of its
calls. Prints the loss and tokens/s per step.

    PYTHONPATH=build/release/python .venv/bin/python examples/torch_train.py --procs 4
    PYTHONPATH=build/release/python .venv/bin/python examples/torch_train.py --attention torch

(.venv/ is the project's virtual environment with torch 2.x, scripts/setup_python.sh; after
`pip install .` the PYTHONPATH is not needed.)

--attention torch swaps in plain PyTorch math attention (softmax(q k^T / sqrt(d) + mask) v with
torch's dropout) on one process, for comparison, without checkpointing unless --recompute
(torch.utils.checkpoint) asks for the work `cpattn train` does by default. Model: pre-norm
decoder, RMSNorm, fused QKV, RoPE on global positions, GQA, GELU MLP, untied LM head; AdamW with
warmup + cosine decay and gradient clipping, as the C++ job.
"""

import argparse
import math
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
import torch.utils.checkpoint

import cpattn


def rope(x, pos, base=10000.0):
    """Rotates interleaved pairs of x [B, S, H, D] by angle pos * base^(-2i/D)."""
    d = x.shape[-1]
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos[:, None].double() * inv[None, :]  # [S, D/2]
    cos, sin = ang.cos().float()[None, :, None, :], ang.sin().float()[None, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


def math_attention(q, k, v, dropout_p, training):
    """Plain PyTorch attention (causal, GQA) with torch dropout: the comparison path."""
    g = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(q.shape[-1])
    S = q.shape[1]
    s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    p = F.dropout(torch.softmax(s, dim=-1), dropout_p, training)
    return torch.einsum("bhij,bjhd->bihd", p, v)


class Block(torch.nn.Module):
    def __init__(self, args, workspace):
        super().__init__()
        self.workspace = workspace  # scratch buffers shared by every layer's calls
        d, self.h, self.hkv = args.d_model, args.heads, args.kv_heads
        self.hd = d // args.heads
        self.g1 = torch.nn.Parameter(torch.ones(d))
        self.g2 = torch.nn.Parameter(torch.ones(d))
        self.wqkv = torch.nn.Linear(d, (self.h + 2 * self.hkv) * self.hd, bias=False)
        self.wo = torch.nn.Linear(self.h * self.hd, d, bias=False)
        self.w1 = torch.nn.Linear(d, 4 * d, bias=False)
        self.w2 = torch.nn.Linear(4 * d, d, bias=False)
        self.args = args

    @staticmethod
    def rmsnorm(x, g):
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-5) * g

    def forward(self, x, pos):
        B, S, _ = x.shape
        qkv = self.wqkv(self.rmsnorm(x, self.g1))
        q, k, v = qkv.split([self.h * self.hd, self.hkv * self.hd, self.hkv * self.hd], dim=-1)
        q = rope(q.reshape(B, S, self.h, self.hd), pos)
        k = rope(k.reshape(B, S, self.hkv, self.hd), pos)
        v = v.reshape(B, S, self.hkv, self.hd)
        if self.args.attention == "cpattn":
            a = cpattn.ring_attention(q, k, v, causal=True, dropout_p=self.args.dropout,
                                      workspace=self.workspace)
        else:
            a = math_attention(q, k, v, self.args.dropout, self.training)
        h = x + self.wo(a.reshape(B, S, -1))
        return h + self.w2(F.gelu(self.w1(self.rmsnorm(h, self.g2)), approximate="tanh"))


class Model(torch.nn.Module):
    def __init__(self, args):
        super().__init__()
        self.embed = torch.nn.Embedding(256, args.d_model)
        workspace = cpattn.Workspace()
        self.blocks = torch.nn.ModuleList([Block(args, workspace) for _ in range(args.layers)])
        self.g = torch.nn.Parameter(torch.ones(args.d_model))
        self.head = torch.nn.Linear(args.d_model, 256, bias=False)
        self.attention = args.attention
        # Checkpoint every layer, as `cpattn train` does by default; --attention torch does not
        # unless asked (--recompute), so that the plain PyTorch run is the usual one.
        self.recompute = args.attention == "cpattn" if args.recompute is None else args.recompute

    def forward(self, tokens, pos):
        x = self.embed(tokens)
        for block in self.blocks:
            if not self.recompute:
                x = block(x, pos)
            elif self.attention == "cpattn":
                x = cpattn.checkpoint(block, x, pos)
            else:
                x = torch.utils.checkpoint.checkpoint(block, x, pos, use_reentrant=False)
        return self.head(Block.rmsnorm(x, self.g))


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def train(rank, world, store, args):
    if world > 1 or args.attention == "cpattn":
        dist.init_process_group("gloo", init_method="file://" + store, rank=rank,
                                world_size=world)
    torch.set_num_threads(args.threads)
    text = torch.frombuffer(bytearray(open(args.text, "rb").read()), dtype=torch.uint8).long()
    torch.manual_seed(args.seed)  # the same weights and batches on every rank
    model = Model(args)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    S, B = args.seq, args.batch
    pos = torch.arange(S)
    local_pos = cpattn.shard(pos[None], dim=1)[0] if world > 1 else pos
    losses = []
    start = time.monotonic()
    for step in range(args.steps):
        t0 = time.monotonic()
        starts = torch.randint(0, text.numel() - S - 1, (B,))
        window = torch.stack([text[s:s + S + 1] for s in starts])
        inputs, targets = window[:, :-1], window[:, 1:]
        if world > 1:
            inputs, targets = cpattn.shard(inputs, dim=1), cpattn.shard(targets, dim=1)
        logits = model(inputs, local_pos)
        loss = F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1),
                               reduction="sum") / (B * S)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        report = loss.detach().clone()
        if world > 1:  # each rank's gradient is its share of the global one: sum them
            for p in model.parameters():
                dist.all_reduce(p.grad)
            dist.all_reduce(report)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args)
        opt.step()
        losses.append(float(report))
        if rank == 0 and (step % args.print_every == 0 or step == args.steps - 1):
            tps = B * S / (time.monotonic() - t0)
            print(f"step {step + 1:4d}  loss {losses[-1]:.4f}  {tps:8.0f} tokens/s", flush=True)
    if rank == 0:
        elapsed = time.monotonic() - start
        final = sum(losses[-10:]) / len(losses[-10:])
        print(f"final loss {final:.4f} (mean of the last {min(10, len(losses))} steps), "
              f"{args.steps * B * S / elapsed:.0f} tokens/s over {elapsed:.1f} s, "
              f"attention {args.attention}, {world} process(es); cpattn live ForwardResults "
              f"{cpattn.memory_stats()['live_forward_results']}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--attention", choices=["cpattn", "torch"], default="cpattn")
    p.add_argument("--procs", type=int, default=4, help="CP group size (cpattn attention only)")
    p.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--recompute", action=argparse.BooleanOptionalAction, default=None,
                   help="checkpoint every layer (default: on with cpattn attention, off with "
                   "torch; cpattn.checkpoint or torch.utils.checkpoint)")
    p.add_argument("--print-every", type=int, default=20)
    args = p.parse_args()
    world = args.procs if args.attention == "cpattn" else 1
    store = tempfile.mktemp(prefix="cpattn-example-")
    try:
        if world == 1:
            train(0, 1, store, args)
        else:
            mp.start_processes(train, args=(world, store, args), nprocs=world,
                               start_method="fork")
    finally:
        if os.path.exists(store):
            os.remove(store)


if __name__ == "__main__":
    main()
