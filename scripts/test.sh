#!/usr/bin/env bash
# Builds a preset (default: release) and runs the whole test suite with ctest.
# Usage: scripts/test.sh [release|debug|asan|tsan]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
scripts/build.sh "$preset"
ctest --preset "$preset" -j2 --timeout 900
