#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs cpattn's main job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh release --target cpattn_cli
build/release/cpattn train --check "$@"
