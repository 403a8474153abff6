#!/usr/bin/env python3
"""Checks that the committed tests/data/cpattn_vectors.json is what generate_vectors.py produces.

Usage:

    .venv/bin/python tests/data/check_vectors.py [--committed PATH] [--generator PATH]

Runs the generator (with this interpreter) into a temporary file and compares it with the
committed file: the same structure (keys in the same order, list lengths, types), equal strings,
integers, booleans and nulls, scalar floats equal, and within each list of numbers (a tensor)
every float within 1e-12 of that tensor's largest finite magnitude in the committed file
(float64 results may differ in the last bits between CPUs and BLAS kernels, so this is not a
byte comparison). Exit status: 0 match; 1 mismatch (the first difference is printed);
77 skipped, when this interpreter lacks torch or numpy (the ctest data.vectors_match_generator
treats 77 as SKIPPED).
"""

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REL_TOL = 1e-12
SKIP = 77


class Mismatch(Exception):
    pass


def _kind(x):
    if x is None:
        return "null"
    if isinstance(x, bool):  # before int: bool is an int in Python
        return "bool"
    if isinstance(x, int):
        return "int"
    if isinstance(x, float):
        return "float"
    if isinstance(x, str):
        return "string"
    if isinstance(x, list):
        return "list"
    if isinstance(x, dict):
        return "object"
    return type(x).__name__


def _is_tensor(x):
    return isinstance(x, list) and any(isinstance(e, float) for e in x) and all(
        e is None or (isinstance(e, (int, float)) and not isinstance(e, bool)) for e in x)


def _largest_magnitude(values):
    return max((abs(e) for e in values if isinstance(e, float) and math.isfinite(e)), default=0.0)


def compare(want, got, path="$"):
    """Raises Mismatch at the first difference of got from want (the committed file)."""
    kw, kg = _kind(want), _kind(got)
    if kw != kg:
        raise Mismatch(f"{path}: committed is {kw} {_short(want)}, generated is {kg} {_short(got)}")
    if kw == "object":
        if list(want) != list(got):
            raise Mismatch(f"{path}: keys differ: committed {list(want)}, generated {list(got)}")
        for key in want:
            compare(want[key], got[key], f"{path}.{key}")
    elif kw == "list":
        if len(want) != len(got):
            raise Mismatch(f"{path}: length differs: committed {len(want)}, generated {len(got)}")
        if _is_tensor(want):
            tol = REL_TOL * _largest_magnitude(want)
            for n, (w, g) in enumerate(zip(want, got)):
                if _kind(w) != _kind(g):
                    raise Mismatch(f"{path}[{n}]: committed {_short(w)}, generated {_short(g)}")
                if isinstance(w, float) and not abs(w - g) <= tol:
                    raise Mismatch(f"{path}[{n}]: committed {w!r}, generated {g!r}, |diff| "
                                   f"{abs(w - g):.3e} > tol {tol:.3e} (1e-12 x largest |value| "
                                   f"of the tensor)")
                if not isinstance(w, float) and w != g:
                    raise Mismatch(f"{path}[{n}]: committed {w!r}, generated {g!r}")
        else:
            for n, (w, g) in enumerate(zip(want, got)):
                compare(w, g, f"{path}[{n}]")
    elif want != got:
        raise Mismatch(f"{path}: committed {_short(want)}, generated {_short(got)}")


def _short(x):
    s = json.dumps(x)
    return s if len(s) <= 80 else s[:77] + "..."


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--committed", default=os.path.join(HERE, "cpattn_vectors.json"))
    parser.add_argument("--generator", default=os.path.join(HERE, "generate_vectors.py"))
    args = parser.parse_args(argv)

    missing = [mod for mod in ("torch", "numpy") if importlib.util.find_spec(mod) is None]
    if missing:
        print(f"SKIPPED: {sys.executable} lacks the Python module {', '.join(missing)}, so the "
              "vectors cannot be regenerated: run it with the project's .venv/bin/python "
              "(scripts/setup_python.sh makes it)")
        return SKIP

    with open(args.committed, encoding="utf-8") as f:
        committed = json.load(f)
    with tempfile.TemporaryDirectory(prefix="cpattn-vectors-") as tmp:
        fresh_path = os.path.join(tmp, "cpattn_vectors.json")
        subprocess.run([sys.executable, args.generator, "--out", fresh_path], check=True)
        with open(fresh_path, encoding="utf-8") as f:
            fresh = json.load(f)
    try:
        compare(committed, fresh)
    except Mismatch as e:
        print(f"MISMATCH: {args.committed} differs from the output of {args.generator}:\n  {e}\n"
              "Regenerate with: .venv/bin/python tests/data/generate_vectors.py "
              "--out tests/data/cpattn_vectors.json (see tests/data/README.md)")
        return 1
    print(f"OK: {args.committed} matches {os.path.basename(args.generator)} "
          f"(floats within {REL_TOL:g} of each tensor's largest magnitude)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
