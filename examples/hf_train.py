#!/usr/bin/env python3
"""A tiny Hugging Face transformers model (Llama- or Qwen2-style config, random weights: nothing is
downloaded) trained with context parallelism on gloo processes: attn_implementation="cpattn"
(cpattn.integrations.transformers), every sequence sharded over the CP group in the zigzag
layout by cpattn.context_parallel, attention dropout, gradient checkpointing and, with
--packed, several documents per sequence (position ids restarting at 0). Byte-level tokens of
/usr/share/common-licenses/GPL-3. Prints the loss per step; --plot writes the loss curve.

    PYTHONPATH=build/release/python .venv/bin/python examples/hf_train.py --procs 4 --plot loss.png
    PYTHONPATH=build/release/python .venv/bin/python examples/hf_train.py --model qwen2 --packed

--check first compares step 0's loss and every parameter gradient under CP with one rank
holding the whole sequence (the same weights, batch and dropout masks): the largest relative
difference must be below 1e-5, or the script exits 1.

Under CP the loss is the sum of the token losses of every rank over the number of target tokens
of the whole batch: the labels are shifted on the whole sequence BEFORE it is sharded (a
model's own shift inside forward would pair each rank's tokens wrongly), and each rank's
gradient is its share, summed over the group.
"""

import argparse
import datetime
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import cpattn
import cpattn.integrations.transformers as cpattn_hf

IGNORE = -100  # transformers' ignore index of labels


def make_config(args):
    from transformers import LlamaConfig, Qwen2Config
    common = dict(vocab_size=256, hidden_size=args.d_model, intermediate_size=2 * args.d_model,
                  num_hidden_layers=args.layers, num_attention_heads=args.heads,
                  num_key_value_heads=args.kv_heads, max_position_embeddings=4 * args.seq,
                  attention_dropout=args.dropout, tie_word_embeddings=False)
    if args.model == "llama":
        return LlamaConfig(**common)
    # Qwen2 with a sliding window of S/4 on every layer from the second on (Qwen2's rule: layer i
    # slides when i >= max_window_layers).
    return Qwen2Config(**common, use_sliding_window=True, sliding_window=args.seq // 4,
                       max_window_layers=1)


def make_model(args):
    from transformers import AutoModelForCausalLM
    torch.manual_seed(args.seed)  # the same weights on every rank
    model = AutoModelForCausalLM.from_config(make_config(args), attn_implementation="cpattn")
    model.train()
    if args.checkpointing:
        # transformers 5 renamed gradient_checkpointing_enable (a deprecated alias since then).
        enable = getattr(model, "activation_checkpointing_enable", None) or \
            model.gradient_checkpointing_enable
        enable({"use_reentrant": False})
    return model


def batch(text, step, args):
    """(input_ids, position_ids, labels) [B, S] of the whole sequence: labels shifted here, and
    with --packed documents of random lengths whose positions restart at 0 and whose last token
    predicts nothing (IGNORE)."""
    g = torch.Generator().manual_seed(args.seed * 100003 + step)
    b, s = args.batch, args.seq
    starts = torch.randint(0, text.numel() - s - 1, (b,), generator=g)
    window = torch.stack([text[i:i + s + 1] for i in starts])
    ids, labels = window[:, :-1].clone(), window[:, 1:].clone()
    pos = torch.arange(s).expand(b, s).clone()
    if args.packed:
        cuts = sorted(torch.randperm(s - 1, generator=g)[:3].add(1).tolist())
        for begin, end in zip([0] + cuts, cuts + [s]):
            pos[:, begin:end] = torch.arange(end - begin)
            labels[:, end - 1] = IGNORE
    return ids, pos, labels


def loss_and_grads(model, ids, pos, labels, targets, group, timeout):
    """This rank's share of the mean token loss (targets: the whole batch's target count),
    backward included (inside the context: autograd saved the sharded buffers, and the
    checkpointed layers' recompute runs CP attention too)."""
    with cpattn.context_parallel(group, buffers=[ids, pos, labels], seq_dims=[1, 1, 1],
                                 timeout=timeout):
        logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(),
                               ignore_index=IGNORE, reduction="sum") / targets
        model.zero_grad(set_to_none=True)
        loss.backward()
    return loss.detach()


def check(model, text, args, group):
    """Step 0 under CP vs one rank: (loss rel, grad rel)."""
    ids, pos, labels = batch(text, 0, args)
    targets = int((labels != IGNORE).sum())
    torch.manual_seed(args.seed + 1)
    loss = loss_and_grads(model, ids.clone(), pos.clone(), labels.clone(), targets, group,
                          args.timeout)
    dist.all_reduce(loss, group=group)
    grads = [p.grad.clone() for p in model.parameters()]
    for gr in grads:
        dist.all_reduce(gr, group=group)
    torch.manual_seed(args.seed + 1)
    alone = loss_and_grads(model, ids, pos, labels, targets, None, args.timeout)
    loss_rel = float((loss - alone).abs() / alone.abs())
    grad_rel = max(float((g - p.grad).abs().max() / p.grad.abs().max().clamp_min(1e-30))
                   for g, p in zip(grads, model.parameters()))
    return loss_rel, grad_rel


def train(rank, world, store, args):
    # The deadline of the example's own collectives too (gloo's default is 30 minutes): a rank
    # that fails makes the others fail within it instead of waiting.
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    torch.set_num_threads(args.threads)
    cpattn_hf.register()
    group = dist.group.WORLD
    text = torch.frombuffer(bytearray(open(args.text, "rb").read()), dtype=torch.uint8).long()
    model = make_model(args)
    status = 0
    if args.check:
        loss_rel, grad_rel = check(model, text, args, group)
        ok = loss_rel < 1e-5 and grad_rel < 1e-5
        status = 0 if ok else 1
        if rank == 0:
            print(f"check: cp={world} vs cp=1 at step 0: loss rel {loss_rel:.2e}, grad rel "
                  f"{grad_rel:.2e} (limit 1e-5): {'ok' if ok else 'FAILED'}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    losses = []
    start = time.monotonic()
    for step in range(args.steps):
        ids, pos, labels = batch(text, step, args)
        targets = int((labels != IGNORE).sum())
        torch.manual_seed(args.seed * 7919 + step)  # the dropout masks, alike on every rank
        loss = loss_and_grads(model, ids, pos, labels, targets, group, args.timeout)
        for p in model.parameters():  # each rank's gradient is its share: sum them
            dist.all_reduce(p.grad, group=group)
        dist.all_reduce(loss, group=group)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss))
        if rank == 0 and (step % args.print_every == 0 or step == args.steps - 1):
            print(f"step {step + 1:4d}  loss {losses[-1]:.4f}", flush=True)
    if rank == 0:
        elapsed = time.monotonic() - start
        final = sum(losses[-10:]) / len(losses[-10:])
        print(f"final loss {final:.4f} (mean of the last {min(10, len(losses))} steps), "
              f"{args.steps * args.batch * args.seq / elapsed:.0f} tokens/s, model {args.model}, "
              f"cp={world}, dropout {args.dropout}, checkpointing {args.checkpointing}, packed "
              f"{args.packed}; cpattn live ForwardResults "
              f"{cpattn.memory_stats()['live_forward_results']}", flush=True)
        if args.plot:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            plt.figure(figsize=(6, 4))
            plt.plot(range(1, len(losses) + 1), losses)
            plt.xlabel("step")
            plt.ylabel("loss (nats per byte)")
            plt.title(f"{args.model}, cp={world}, dropout {args.dropout}")
            plt.savefig(args.plot, dpi=100)
            print(f"loss curve: {args.plot}", flush=True)
    return status


def _worker(rank, world, store, args, results):
    try:
        results.put((rank, train(rank, world, store, args)))
    except BaseException as e:
        print(f"rank {rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        results.put((rank, 2))
        raise


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["llama", "qwen2"], default="llama")
    p.add_argument("--procs", type=int, default=4, help="CP group size (gloo processes)")
    p.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--dropout", type=float, default=0.1, help="attention_dropout")
    p.add_argument("--no-checkpointing", dest="checkpointing", action="store_false")
    p.add_argument("--packed", action="store_true", help="4 documents per sequence")
    p.add_argument("--check", action="store_true", help="compare step 0 with cp=1 first")
    p.add_argument("--plot", help="write the loss curve to this PNG")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--print-every", type=int, default=10)
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds: the deadline of every wait on another rank")
    args = p.parse_args()
    store = tempfile.mktemp(prefix="cpattn-hf-store-")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, args.procs, store, args, results))
             for r in range(args.procs)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    if os.path.exists(store):
        os.remove(store)
    codes = [proc.exitcode for proc in procs]
    statuses = [results.get()[1] for _ in procs] if all(c == 0 for c in codes) else [2]
    sys.exit(max(statuses))


if __name__ == "__main__":
    main()
