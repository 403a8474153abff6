#!/usr/bin/env bash
# Installs missing packages, then configures and builds one CMake preset (default: release).
# Usage: scripts/build.sh [release|debug|asan|tsan]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
scripts/setup.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
