#!/usr/bin/env python3
"""Generates tests/data/cpattn_vectors.json, cpattn's known-answer vectors.

Usage (the project's virtual environment, which has PyTorch and NumPy: scripts/setup_python.sh):

    .venv/bin/python tests/data/generate_vectors.py --out tests/data/cpattn_vectors.json

Without --out (or with --out -) the JSON goes to stdout. The output is deterministic: two runs on
the same machine give byte-identical files (tests/data/check_vectors.py compares a fresh run with
the committed file, floats within 1e-12 of each tensor's largest magnitude, since float64 results
may differ in the last bits between CPUs and BLAS kernels).

The answers come from tests/data/float64_attention.py, an independent float64 implementation of
the contracts of docs/design.md (section 1: what attention computes, section 3: the kernel
contract, section 4: the dropout contract) in PyTorch autograd with explicit masks and its own
Philox, sharing no code with cpattn's C++. Its docstring states the formulas. The script asserts
that its Philox reproduces the three Random123 known answers and stops otherwise.

Inputs: for each attention case a numpy.random.RandomState seeded with zlib.crc32(case name)
draws q, k, v, dout (in that order) with standard_normal in BSHD shape; each value is rounded to
float32 and back, so the fp32 kernel reads exactly the inputs the float64 answers were computed
from. The dropout-mask samples are drawn from numpy.random.RandomState(MASK_SAMPLE_SEED) after a
fixed list of edge cases. (RandomState is NumPy's frozen legacy generator: its streams do not
change between NumPy versions.)

Changing the dropout contract or the attention math is a breaking change: regenerate the file
with this script and commit both together (tests/data/README.md).
"""

import argparse
import json
import math
import os
import sys
import zlib

# One thread everywhere: the summation order of float64 reductions then does not depend on the
# machine's core count or load, and two runs are byte-identical.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

from float64_attention import (PHILOX_KATS, attention, check_philox_kats,  # noqa: E402
                               dropout_bits, dropout_keep)

MASK_SAMPLE_SEED = 20240611
NUM_MASK_SAMPLES = 64  # tests/rng/dropout_test.cpp expects exactly 64

LAYOUT = "BSHD (row-major [B, S, H, D]); lse is [B, Hq, Sq]"

ABOUT = (
    "cpattn known-answer vectors: Philox4x32-10 known answers (Random123), dropout-mask samples "
    "and float64 attention cases (inputs q, k, v, dout; answers out, lse, dq, dk, dv). Generated "
    "by tests/data/generate_vectors.py from an independent float64 PyTorch implementation "
    "(autograd, explicit masks, its own Philox); do not edit by hand. Contracts: docs/design.md "
    "sections 1 (what attention computes), 3 (kernel contract) and 4 (dropout contract). Tensors "
    "are flat row-major float64 lists (BSHD; lse is [B, Hq, Sq]); null in lse means -inf. "
    "Format: tests/data/README.md."
)


def _iota(n, start=0):
    return list(range(start, start + n))


def _case(name, B, Sq, Sk, Hq, Hkv, Dqk, Dv, softmax_scale=None, causal=False, window_left=-1,
          window_right=-1, dropout_p=0.0, seed=0, offset=0, q_pos=None, k_pos=None, q_doc=None,
          k_doc=None):
    return {
        "name": name, "B": B, "Sq": Sq, "Sk": Sk, "Hq": Hq, "Hkv": Hkv, "Dqk": Dqk, "Dv": Dv,
        "softmax_scale": 1.0 / math.sqrt(Dqk) if softmax_scale is None else softmax_scale,
        "causal": causal, "window_left": window_left, "window_right": window_right,
        "dropout_p": dropout_p, "seed": seed, "offset": offset,
        "q_pos": _iota(Sq) if q_pos is None else q_pos,
        "k_pos": _iota(Sk) if k_pos is None else k_pos,
        "q_doc": q_doc, "k_doc": k_doc,
    }


# The attention cases (softmax_scale defaults to 1 / sqrt(Dqk), positions to 0..S-1).
CASES = [
    _case("full_small", 1, 7, 7, 1, 1, 8, 8),
    _case("causal_gqa", 2, 13, 13, 4, 2, 16, 16, softmax_scale=0.25, causal=True),
    _case("causal_mqa_dqk_ne_dv", 1, 9, 9, 4, 1, 24, 8, causal=True),
    _case("window_l3_r1", 1, 11, 11, 2, 2, 8, 8, window_left=3, window_right=1),
    _case("causal_window_l4", 1, 12, 12, 2, 1, 8, 8, causal=True, window_left=4),
    _case("docs_causal", 1, 10, 10, 2, 2, 8, 8, causal=True,
          q_doc=[0, 0, 0, 1, 2, 2, 2, 2, 3, 3], k_doc=[0, 0, 0, 1, 2, 2, 2, 2, 3, 3]),
    _case("dropout_full", 1, 9, 10, 2, 1, 8, 8, dropout_p=0.3, seed=0x123456789ABC, offset=7),
    _case("dropout_causal_gqa", 2, 8, 8, 4, 2, 8, 8, causal=True, dropout_p=0.5, seed=42,
          offset=(2 << 32) + 5),
    _case("zigzag_positions_causal_dropout", 1, 8, 16, 2, 1, 8, 8, causal=True, dropout_p=0.1,
          seed=99, offset=3, q_pos=[0, 1, 2, 3, 12, 13, 14, 15]),
    _case("empty_rows_window", 1, 6, 6, 1, 1, 4, 4, softmax_scale=0.5, causal=True,
          window_left=1, q_pos=[0, 1, 2, 3, 12, 13], k_pos=[10, 11, 12, 13, 14, 15]),
    _case("sq_ne_sk_offsets", 1, 5, 9, 2, 2, 8, 8, causal=True, q_pos=[4, 5, 6, 7, 8]),
]


# ---------------------------------------------------------------------------------------------
# Attention cases
# ---------------------------------------------------------------------------------------------

def answers(c, inputs):
    """float64 forward and autograd backward of one case (float64_attention.attention): numpy
    arrays out [B, Sq, Hq, Dv], lse [B, Hq, Sq] (-inf for empty rows), dq, dk, dv."""
    tq, tk, tv = (torch.tensor(inputs[x], dtype=torch.float64, requires_grad=True)
                  for x in ("q", "k", "v"))
    out, lse = attention(tq, tk, tv, c["softmax_scale"], c["q_pos"], c["k_pos"], c["q_doc"],
                         c["k_doc"], c["causal"], c["window_left"], c["window_right"],
                         c["dropout_p"], c["seed"], c["offset"])
    (out * torch.tensor(inputs["dout"], dtype=torch.float64)).sum().backward()
    # + 0.0 turns any -0.0 into 0.0.
    return {
        "out": out.detach().numpy() + 0.0,
        "lse": lse.detach().numpy() + 0.0,
        "dq": tq.grad.numpy() + 0.0,
        "dk": tk.grad.numpy() + 0.0,
        "dv": tv.grad.numpy() + 0.0,
    }


def make_inputs(c):
    """q, k, v, dout: standard normal from RandomState(crc32(name)), rounded to float32."""
    rs = np.random.RandomState(zlib.crc32(c["name"].encode("utf-8")))
    B, Sq, Sk, Hq, Hkv, Dqk, Dv = (c[x] for x in ("B", "Sq", "Sk", "Hq", "Hkv", "Dqk", "Dv"))
    shapes = {"q": (B, Sq, Hq, Dqk), "k": (B, Sk, Hkv, Dqk), "v": (B, Sk, Hkv, Dv),
              "dout": (B, Sq, Hq, Dv)}
    return {name: rs.standard_normal(shape).astype(np.float32).astype(np.float64)
            for name, shape in shapes.items()}


def _flat(x):
    return [None if math.isinf(v) and v < 0 else float(v) for v in np.asarray(x).reshape(-1)]


def validate_case(c):
    assert c["Hq"] % c["Hkv"] == 0, c["name"]
    assert len(c["q_pos"]) == c["Sq"] and len(c["k_pos"]) == c["Sk"], c["name"]
    assert (c["q_doc"] is None) == (c["k_doc"] is None), c["name"]
    if c["q_doc"] is not None:
        assert len(c["q_doc"]) == c["Sq"] and len(c["k_doc"]) == c["Sk"], c["name"]
    assert 0.0 <= c["dropout_p"] < 1.0, c["name"]


def attention_case(c):
    validate_case(c)
    inputs = make_inputs(c)
    result = answers(c, inputs)
    record = {"name": c["name"], "layout": LAYOUT}
    for key in ("B", "Sq", "Sk", "Hq", "Hkv", "Dqk", "Dv", "softmax_scale", "causal",
                "window_left", "window_right", "dropout_p", "seed", "offset", "q_pos", "k_pos",
                "q_doc", "k_doc"):
        record[key] = c[key]
    for key in ("q", "k", "v", "dout"):
        record[key] = _flat(inputs[key])
    for key in ("out", "lse", "dq", "dk", "dv"):
        record[key] = _flat(result[key])
    return record


# ---------------------------------------------------------------------------------------------
# Dropout-mask samples
# ---------------------------------------------------------------------------------------------

U64 = (1 << 64) - 1

# (seed, offset, b, h, Hq, i, j): edges of the mapping first.
MASK_EDGE_CASES = [
    (0, 0, 0, 0, 1, 0, 0),                                  # all zero
    (U64, U64, 0, 0, 1, (1 << 32) - 1, 3),                  # all-ones seed and offset
    (0x0123456789ABCDEF, 1 << 32, 1, 2, 3, 17, 5),          # offset = 2^32: lo32 0, hi32 1
    (0xFEDCBA9876543210, (1 << 40) + 7, 2, 1, 4, (1 << 32) + 5, 6),  # i >= 2^32 wraps to 5
    (0x00000007_89ABCDEF, 0x00000007_00000001, 0, 3, 8, 1000, 7),    # hi32(seed) == hi32(offset)
    (42, (2 << 32) + 5, 1, 3, 4, (1 << 40) - 1, (1 << 34) + 3),      # j // 4 = 2^32 wraps to 0
    (99, 3, 0, 1, 2, (1 << 33) + 123, 4 * ((1 << 32) - 1) + 2),     # j // 4 = 2^32 - 1
    (0x1234567890ABCDEF, 0x0000000500000003, 63, 127, 128, 123456789, 1023),  # b*Hq+h = 8191
]


def mask_sample(seed, offset, b, h, hq, i, j):
    r = dropout_bits(seed, offset, b, h, hq, i, j)
    return {"seed": seed, "offset": offset, "b": b, "h": h, "Hq": hq, "i": i, "j": j, "r": r,
            "keep_p0.1": dropout_keep(r, 0.1), "keep_p0.5": dropout_keep(r, 0.5)}


def mask_samples():
    rows = list(MASK_EDGE_CASES)
    rs = np.random.RandomState(MASK_SAMPLE_SEED)

    def u64():
        return int(rs.randint(0, 1 << 32, dtype=np.uint64)) << 32 | int(
            rs.randint(0, 1 << 32, dtype=np.uint64))

    n = 0
    while len(rows) < NUM_MASK_SAMPLES:
        seed = u64()
        # Offsets: mostly 2^32 <= offset < 2^40 (hi32 in the key), every fourth a full 64 bits.
        offset = u64() if n % 4 == 3 else int(rs.randint(1 << 32, 1 << 40, dtype=np.int64))
        hq = int(rs.randint(1, 65))
        h = int(rs.randint(0, hq))
        b = int(rs.randint(0, 8))
        # Positions: mostly below 2^20, every eighth up to 2^40 (beyond 32 bits).
        top = 1 << 40 if n % 8 == 7 else 1 << 20
        i = int(rs.randint(0, top, dtype=np.int64))
        j = 4 * int(rs.randint(0, top // 4, dtype=np.int64)) + n % 4  # every lane j % 4
        rows.append((seed, offset, b, h, hq, i, j))
        n += 1
    return [mask_sample(*row) for row in rows]


# ---------------------------------------------------------------------------------------------

def build():
    try:
        check_philox_kats()
    except AssertionError as e:
        raise SystemExit(f"generate_vectors.py: {e}") from e
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    return {
        "about": ABOUT,
        "philox4x32_10_kat": PHILOX_KATS,
        "dropout_mask_samples": mask_samples(),
        "attention_cases": [attention_case(c) for c in CASES],
    }


def dumps(vectors):
    """Compact JSON, floats as Python's repr of float64, one trailing newline."""
    return json.dumps(vectors, separators=(",", ":"), allow_nan=False) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="-",
                        help="output path (default '-': stdout)")
    args = parser.parse_args(argv)
    text = dumps(build())
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
