#!/usr/bin/env bash
# The test command (README, .ci/run). Without an argument: builds the release preset and runs the
# whole suite, then builds the asan preset (AddressSanitizer + UBSan) for the suites whose code
# owns memory and threads (state, comm, cp) and runs them. With a preset name: builds that preset
# and runs its whole suite.
# Usage: scripts/test.sh [release|debug|asan|tsan]
set -euo pipefail
cd "$(dirname "$0")/.."
run_preset() {
  scripts/build.sh "$1" "${@:3}"
  ctest --preset "$1" -j2 --timeout 900 ${2:+-L "$2"}
}
if (($# == 0)); then
  run_preset release ""
  echo "test.sh: sanitizers (asan preset) on the state, comm and cp suites"
  run_preset asan "state|comm|cp" --target test_state --target test_comm --target test_comm_mpi \
    --target test_comm_mpi_failure --target test_cp --target test_cp_mpi --target cpattn_cli
else
  run_preset "$1" ""
fi
