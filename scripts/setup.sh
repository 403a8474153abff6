#!/usr/bin/env bash
# Installs the Debian 12 packages cpattn builds with, only those missing (idempotent). Needs root
# (or sudo) only when something is missing. The Python package's torch and test tools come from
# PyPI into .venv/ (scripts/setup_python.sh, run by scripts/test.sh), never from Debian.
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config clang-format clang libclang-rt-14-dev
          googletest libgtest-dev libgmock-dev libbenchmark-dev librapidcheck-dev
          libopenblas-dev libdnnl-dev libcli11-dev nlohmann-json3-dev libopenmpi-dev openmpi-bin gnuplot-nox
          python3-venv python3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  log=$(mktemp /tmp/cpattn-setup.XXXXXX.log)
  if ! { "${sudo_cmd[@]}" apt-get update -qq &&
         DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq \
           --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "setup: apt-get failed (full log: $log)" >&2
    exit 1
  fi
  echo "setup: done (log: $log)"
fi
