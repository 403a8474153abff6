#!/usr/bin/env bash
# The package as a user installs it: `pip wheel . --no-build-isolation` with PYTHON (the project's
# virtual environment) makes a wheel, which is installed into a fresh virtual environment that
# sees PYTHON's torch (a .pth file, so torch is not downloaded again); from outside the source
# tree the installed package reports the library's version and computes attention that equals
# torch's scaled_dot_product_attention.
# Usage: check_wheel.sh PYTHON SOURCE_DIR WORK_DIR VERSION
set -euo pipefail
python=$1 source=$2 work=$3 version=$4
rm -rf "$work/wheelhouse" "$work/venv"
mkdir -p "$work"
"$python" -m pip wheel "$source" --no-build-isolation --no-deps -q -w "$work/wheelhouse" \
  --config-settings=build-dir="$work/build"
wheel=$(ls "$work"/wheelhouse/cpattn-"$version"-*.whl)
echo "wheel: $(basename "$wheel")"
/usr/bin/python3 -m venv "$work/venv"
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/torch_env.pth"
"$work/venv/bin/python" -m pip install -q --no-deps --no-index "$wheel"
cd "$work"
"$work/venv/bin/python" - "$version" <<'PY'
import sys
import torch
import torch.nn.functional as F
import cpattn
assert cpattn.__version__ == sys.argv[1], (cpattn.__version__, sys.argv[1])
assert "/venv/" in cpattn.__file__, cpattn.__file__  # the installed copy, not the tree's
q, k, v = (torch.randn(2, 97, 4, 16, dtype=torch.float64).float() for _ in range(3))
out = cpattn.attention(q, k, v, causal=True)
ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                     is_causal=True).transpose(1, 2)
err = (out - ref).abs().max().item()
assert err < 1e-5, err
print(f"installed cpattn {cpattn.__version__} from {cpattn.__file__}: max |out - sdpa| {err:.2e}")
print("wheel: ok")
PY
