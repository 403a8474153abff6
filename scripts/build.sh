#!/usr/bin/env bash
# Installs missing packages, then configures and builds one CMake preset (default: release).
# Usage: scripts/build.sh [release|debug|asan|tsan] [extra cmake --build arguments, e.g. --target X]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
shift || true
scripts/setup.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" "$@"
