#!/usr/bin/env bash
# Creates the project's virtual environment .venv/ (git-ignored) with the pinned packages of
# python/requirements.txt from PyPI (torch 2.x, numpy, pytest, transformers, scikit-build-core,
# matplotlib), only what is missing (idempotent). First the Debian packages (scripts/setup.sh:
# python3-venv, python3-dev, and the compilers `pip install .` builds the extension with). Never
# installs into the system interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
requirements=python/requirements.txt
if [[ ! -x .venv/bin/python ]]; then
  echo "setup_python: creating .venv"
  /usr/bin/python3 -m venv .venv
fi
# Every pin already installed at its version: nothing to do (no network).
wanted=$(grep -E '^[A-Za-z0-9_.-]+==' "$requirements" | tr 'A-Z_' 'a-z-' | sort)
have=$(.venv/bin/python -m pip freeze --all 2>/dev/null | tr 'A-Z_' 'a-z-' | sort)
missing=$(comm -23 <(echo "$wanted") <(echo "$have"))
# torch's wheels (a CUDA build) unpack to about 6 GiB in .venv, and pip keeps the downloads (about
# 4 GiB) in its temporary folder (Python's tempfile.gettempdir(): TMPDIR when it exists, else
# /tmp) until it is done: say so up front rather than fail with "No space left on device" minutes
# into the install. The needs add up per filesystem (stat's device number); a filesystem df cannot
# size is not checked.
if grep -q '^torch==' <<<"$missing"; then
  declare -A need_gib=() path_of=()
  add_need() { # path, GiB
    local dev
    dev=$(stat -c %d "$1" 2>/dev/null) || return 0
    need_gib[$dev]=$((${need_gib[$dev]:-0} + $2))
    path_of[$dev]=${path_of[$dev]:-$1}
  }
  add_need .venv 6
  add_need "$(.venv/bin/python -c 'import tempfile; print(tempfile.gettempdir())')" 4
  for dev in "${!need_gib[@]}"; do
    path=${path_of[$dev]}
    kib=$(df -k --output=avail "$path" 2>/dev/null | tail -n 1 | tr -d ' ') || kib=
    [[ $kib =~ ^[0-9]+$ ]] || continue
    if ((kib / 1048576 < need_gib[$dev])); then
      echo "setup_python: installing torch needs about ${need_gib[$dev]} GiB free on the" \
        "filesystem of $path (.venv: 6 GiB, pip's downloads in its temporary folder: 4 GiB);" \
        "it has $((kib / 1048576)) GiB. Free some space there, or point TMPDIR at a larger disk" >&2
      exit 1
    fi
  done
fi
if [[ -n $missing ]]; then
  echo "setup_python: installing $(echo "$missing" | tr '\n' ' ')(about 4 GB of downloads the first time)"
  log=$(mktemp /tmp/cpattn-setup-python.XXXXXX.log)
  if ! .venv/bin/python -m pip install --disable-pip-version-check -r "$requirements" \
      >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "setup_python: pip install failed (full log: $log)" >&2
    exit 1
  fi
  echo "setup_python: done (log: $log)"
fi
