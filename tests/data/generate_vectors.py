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
draws q, k, v, dout (in that order) with standard_normal in BSHD shape, then for a case with
attention sinks the Hq sink logits (2 * standard_normal); each value is rounded to float32 and
back, so the fp32 kernel reads exactly the inputs the float64 answers were computed from (the
softcaps and ALiBi slopes are float32 values too). The dropout-mask samples are drawn from numpy.random.RandomState(MASK_SAMPLE_SEED) after a
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
    "and float64 attention cases (inputs q, k, v, dout and the sink logits; answers out, lse, dq, "
    "dk, dv, dsink). Generated "
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
          k_doc=None, softcap=0.0, alibi=False, sink=False, slices=None):
    return {
        "name": name, "B": B, "Sq": Sq, "Sk": Sk, "Hq": Hq, "Hkv": Hkv, "Dqk": Dqk, "Dv": Dv,
        "softmax_scale": 1.0 / math.sqrt(Dqk) if softmax_scale is None else softmax_scale,
        "causal": causal, "window_left": window_left, "window_right": window_right,
        "dropout_p": dropout_p, "seed": seed, "offset": offset,
        "q_pos": _iota(Sq) if q_pos is None else q_pos,
        "k_pos": _iota(Sk) if k_pos is None else k_pos,
        "q_doc": q_doc, "k_doc": k_doc,
        "softcap": softcap,
        "alibi_slopes": alibi_slopes(Hq) if alibi else None,
        "sink": sink,  # replaced by the drawn logits (make_inputs) or None
        "slices": None if slices is None else [_slice(*sl) for sl in slices],
    }


def alibi_slopes(Hq):
    """ALiBi's geometric slopes (Press et al. 2022), 2^(-8 (h + 1) / Hq) for head h, as float32
    values."""
    return [float(np.float32(2.0 ** (-8.0 * (h + 1) / Hq))) for h in range(Hq)]


def _slice(q_begin, q_end, k_begin, k_end, type_):
    return {"q_begin": q_begin, "q_end": q_end, "k_begin": k_begin, "k_end": k_end,
            "type": type_}


def _doc_slices(bounds):
    """One causal slice per document [a, b) of `bounds` (a document mask as slices)."""
    return [(a, b, a, b, "causal") for a, b in zip(bounds, bounds[1:])]


def _grid_slices(q_cuts, k_cuts, name):
    """A slice of a random type (or none) in every cell of the grid of q_cuts x k_cuts; the
    types are a shuffle (RandomState(crc32(name) + 1)) of each of the four twice and two empty
    cells, cut to the cell count, so every type appears when there are at least 8 cells."""
    cells = [(qa, qb, ka, kb) for qa, qb in zip(q_cuts, q_cuts[1:])
             for ka, kb in zip(k_cuts, k_cuts[1:])]
    types = ["full", "causal", "inv_causal", "bi_causal"] * 2 + [None] * (len(cells) - 8)
    rs = np.random.RandomState(zlib.crc32(name.encode("utf-8")) + 1)
    order = rs.permutation(len(types))
    return [(*cell, types[t]) for cell, t in zip(cells, order) if types[t] is not None]


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
    # Attention sinks, logit softcap, ALiBi, mask slices (docs/design.md section 1).
    _case("sink_causal_gqa", 2, 9, 9, 4, 2, 8, 8, causal=True, sink=True),
    _case("sink_empty_rows_window", 1, 6, 6, 2, 1, 4, 4, softmax_scale=0.5, causal=True,
          window_left=1, q_pos=[0, 1, 2, 3, 12, 13], k_pos=[10, 11, 12, 13, 14, 15], sink=True),
    _case("softcap_dqk_ne_dv", 1, 7, 11, 2, 1, 16, 8, softmax_scale=0.9, softcap=1.5,
          q_pos=[4, 5, 6, 7, 8, 9, 10]),
    _case("alibi_causal_zigzag", 1, 8, 16, 4, 2, 8, 8, causal=True, alibi=True,
          q_pos=[0, 1, 2, 3, 12, 13, 14, 15]),
    _case("slices_prefix_lm", 1, 12, 16, 2, 1, 8, 8, q_pos=_iota(12, 4),
          slices=[(0, 16, 0, 6, "full"), (6, 16, 6, 16, "causal")]),
    _case("slices_documents", 1, 10, 14, 2, 2, 8, 8, q_pos=_iota(10, 4),
          slices=_doc_slices([0, 4, 5, 11, 14])),
    _case("slices_random_types", 1, 9, 13, 2, 1, 8, 8,
          q_pos=[14, 2, 9, 5, 11, 0, 7, 15, 3], k_pos=[1, 12, 6, 0, 15, 9, 3, 10, 4, 13, 7, 2, 8],
          slices=_grid_slices([0, 5, 9, 16], [0, 3, 10, 16], "slices_random_types")),
    _case("slices_sink_softcap_alibi_dropout", 2, 9, 12, 4, 2, 8, 8, softmax_scale=0.6,
          softcap=2.0, alibi=True, sink=True, dropout_p=0.2, seed=0xC0FFEE, offset=(3 << 32) + 1,
          q_pos=_iota(9, 3), k_pos=_iota(12),
          slices=_grid_slices([0, 4, 8, 12], [0, 2, 7, 12], "slices_sink_softcap_alibi_dropout")),
    _case("sink_softcap_alibi_window_docs_dropout", 2, 12, 12, 4, 2, 12, 8, softmax_scale=0.4,
          softcap=2.0, alibi=True, sink=True, window_left=5, window_right=2, dropout_p=0.25,
          seed=0x5EED, offset=(1 << 32) + 9, q_doc=[0] * 5 + [1] * 6 + [2],
          k_doc=[0] * 5 + [1] * 6 + [2]),
]


# ---------------------------------------------------------------------------------------------
# Attention cases
# ---------------------------------------------------------------------------------------------

def answers(c, inputs):
    """float64 forward and autograd backward of one case (float64_attention.attention): numpy
    arrays out [B, Sq, Hq, Dv], lse [B, Hq, Sq] (-inf for empty rows), dq, dk, dv."""
    tq, tk, tv = (torch.tensor(inputs[x], dtype=torch.float64, requires_grad=True)
                  for x in ("q", "k", "v"))
    tsink = None if c["sink"] is None else torch.tensor(c["sink"], dtype=torch.float64,
                                                          requires_grad=True)
    out, lse = attention(tq, tk, tv, c["softmax_scale"], c["q_pos"], c["k_pos"], c["q_doc"],
                         c["k_doc"], c["causal"], c["window_left"], c["window_right"],
                         c["dropout_p"], c["seed"], c["offset"], softcap=c["softcap"],
                         alibi_slopes=c["alibi_slopes"], sink=tsink, slices=c["slices"])
    (out * torch.tensor(inputs["dout"], dtype=torch.float64)).sum().backward()
    # + 0.0 turns any -0.0 into 0.0.
    return {
        "out": out.detach().numpy() + 0.0,
        "lse": lse.detach().numpy() + 0.0,
        "dq": tq.grad.numpy() + 0.0,
        "dk": tk.grad.numpy() + 0.0,
        "dv": tv.grad.numpy() + 0.0,
        "dsink": None if tsink is None else tsink.grad.numpy() + 0.0,
    }


def make_inputs(c):
    """q, k, v, dout: standard normal from RandomState(crc32(name)), rounded to float32; then,
    when c["sink"] is True, replaces it by Hq sink logits 2 * standard_normal from the same
    stream, rounded to float32 (None otherwise)."""
    rs = np.random.RandomState(zlib.crc32(c["name"].encode("utf-8")))
    B, Sq, Sk, Hq, Hkv, Dqk, Dv = (c[x] for x in ("B", "Sq", "Sk", "Hq", "Hkv", "Dqk", "Dv"))
    shapes = {"q": (B, Sq, Hq, Dqk), "k": (B, Sk, Hkv, Dqk), "v": (B, Sk, Hkv, Dv),
              "dout": (B, Sq, Hq, Dv)}
    inputs = {name: rs.standard_normal(shape).astype(np.float32).astype(np.float64)
              for name, shape in shapes.items()}
    c["sink"] = ([float(np.float32(2.0 * x)) for x in rs.standard_normal(Hq)] if c["sink"]
                 else None)
    return inputs


def _flat(x):
    if x is None:
        return None
    return [None if math.isinf(v) and v < 0 else float(v) for v in np.asarray(x).reshape(-1)]


def validate_case(c):
    assert c["Hq"] % c["Hkv"] == 0, c["name"]
    assert len(c["q_pos"]) == c["Sq"] and len(c["k_pos"]) == c["Sk"], c["name"]
    assert (c["q_doc"] is None) == (c["k_doc"] is None), c["name"]
    if c["q_doc"] is not None:
        assert len(c["q_doc"]) == c["Sq"] and len(c["k_doc"]) == c["Sk"], c["name"]
    assert 0.0 <= c["dropout_p"] < 1.0, c["name"]
    assert c["softcap"] >= 0.0 and float(np.float32(c["softcap"])) == c["softcap"], c["name"]
    if c["alibi_slopes"] is not None:
        assert len(c["alibi_slopes"]) == c["Hq"], c["name"]
    for sl in c["slices"] or []:
        assert 0 <= sl["q_begin"] <= sl["q_end"] and 0 <= sl["k_begin"] <= sl["k_end"], c["name"]


def attention_case(c):
    c = dict(c)  # make_inputs fills in the sink logits
    inputs = make_inputs(c)
    validate_case(c)
    result = answers(c, inputs)
    record = {"name": c["name"], "layout": LAYOUT}
    for key in ("B", "Sq", "Sk", "Hq", "Hkv", "Dqk", "Dv", "softmax_scale", "causal",
                "window_left", "window_right", "dropout_p", "seed", "offset", "q_pos", "k_pos",
                "q_doc", "k_doc", "softcap", "alibi_slopes", "sink", "slices"):
        record[key] = c[key]
    for key in ("q", "k", "v", "dout"):
        record[key] = _flat(inputs[key])
    for key in ("out", "lse", "dq", "dk", "dv", "dsink"):
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
