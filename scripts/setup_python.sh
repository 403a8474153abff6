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
# 4 GiB) in its temporary folder until it is done: say so up front rather than fail with "No space
# left on device" minutes into the install.
mount_of() { df -P "$1" | awk 'NR == 2 {print $6}'; }
require_free() { # path, GiB, what needs them
  local have
  have=$(($(df -Pk "$1" | awk 'NR == 2 {print $4}') / 1048576))
  if ((have < $2)); then
    echo "setup_python: $3 needs about $2 GiB free on $(mount_of "$1"), which has $have GiB;" \
      "free some space there (or point TMPDIR at a larger disk)" >&2
    exit 1
  fi
}
if grep -q '^torch==' <<<"$missing"; then
  tmp=${TMPDIR:-/tmp}
  if [[ $(mount_of .venv) == $(mount_of "$tmp") ]]; then
    require_free .venv 10 "installing torch (6 GiB in .venv, 4 GiB of downloads in $tmp)"
  else
    require_free .venv 6 "installing torch into .venv"
    require_free "$tmp" 4 "pip's downloads of torch (in $tmp)"
  fi
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
