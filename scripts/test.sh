#!/usr/bin/env bash
# The test command (README, .ci/run). Without an argument: builds the release preset and runs the
# whole suite, then builds the asan preset (AddressSanitizer + UBSan) for the suites whose code
# owns memory and threads (state, comm, cp) and runs them, then builds the fuzz preset (clang,
# libFuzzer, ASan + UBSan) and fuzzes every parser of outside input for CPATTN_FUZZ_SECONDS (30)
# each. With a preset name: builds that preset and runs its whole suite. First it installs what
# is missing: Debian packages (scripts/setup.sh) and the Python package's virtual environment
# .venv/ from PyPI (scripts/setup_python.sh: torch 2.x, pytest, transformers...).
# Usage: scripts/test.sh [release|debug|asan|tsan|fuzz]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_python.sh  # runs scripts/setup.sh first
run_preset() {
  scripts/build.sh "$1" "${@:3}"
  ctest --preset "$1" -j2 --timeout 900 ${2:+-L "$2"}
}
fuzz_stage() {
  run_preset fuzz "fuzz" --target fuzz_targets
}
if (($# == 0)); then
  run_preset release ""
  # The asan test preset (CMakePresets.json) leaves out three tests whose subject is the numbers
  # at scale, not ownership, and that the release stage runs: RingErrorFlatInP (its bound
  # assumes the release build's FMA contraction, which -O1 does not do) and the 256-rank full
  # zigzag and 128-rank full contiguous cases of RingManyRanks.
  echo "test.sh: sanitizers (asan preset) on the state, comm and cp suites"
  run_preset asan "state|comm|cp" --target test_state --target test_comm --target test_comm_mpi \
    --target test_comm_mpi_failure --target test_cp --target test_cp_mpi --target cpattn_cli
  echo "test.sh: fuzzing (fuzz preset) every parser of outside input"
  fuzz_stage
elif [[ $1 == fuzz ]]; then
  fuzz_stage
else
  run_preset "$1" ""
fi
