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
if [[ -n $missing ]]; then
  echo "setup_python: installing $(echo "$missing" | tr '\n' ' ')(a few GB the first time)"
  log=$(mktemp /tmp/cpattn-setup-python.XXXXXX.log)
  if ! .venv/bin/python -m pip install --disable-pip-version-check -r "$requirements" \
      >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "setup_python: pip install failed (full log: $log)" >&2
    exit 1
  fi
  echo "setup_python: done (log: $log)"
fi
