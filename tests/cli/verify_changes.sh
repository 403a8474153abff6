#!/bin/bash
# Runs `cpattn verify BASE_ARGS...` and again with FLAG_ARGS... added (a feature: --sink,
# --softcap X, --alibi, --slices ...). Both runs must exit 0 (every case passed) and list the
# same number of cases, and each case's errors against the float64 reference (the rows not named
# *_vs_kernel, whose errors may be exactly 0 in both runs) of out, lse, dq, dk, dv (the table's
# first five error columns) must differ between the runs: the cases and seeds are the same, so a
# flag that reached neither the kernel nor the reference would leave every error as it was, bit
# for bit in the printed digits. Prints the run with the flags, then
# "verify_changes: OK: N cases changed" or "verify_changes: FAIL: <why>" (exit 1).
# Usage: verify_changes.sh CPATTN BASE_ARGS... --with FLAG_ARGS...
cpattn=$1
shift
base=()
while (($#)) && [[ $1 != --with ]]; do
  base+=("$1")
  shift
done
(($#)) || { echo "verify_changes: FAIL: no --with"; exit 1; }
shift
flags=("$@")
fail() { echo "verify_changes: FAIL: $1"; exit 1; }
without=$("$cpattn" verify "${base[@]}" 2>&1) || { printf '%s\n' "$without"; fail "the run without the flags failed"; }
with=$("$cpattn" verify "${base[@]}" "${flags[@]}" 2>&1)
status=$?
printf '%s\n' "$with"
((status == 0)) || fail "the run with ${flags[*]} exited $status"
errors() {
  awk '$2 == "err" && ($NF == "PASS" || $NF == "FAIL") && $1 !~ /_vs_kernel$/ {
    print $3, $4, $5, $6, $7
  }' <<<"$1"
}
a=$(errors "$without")
b=$(errors "$with")
n=$(wc -l <<<"$a")
[[ -n $a && $n -eq $(wc -l <<<"$b") ]] || fail "the runs list different cases"
same=$(paste -d'|' <(printf '%s\n' "$a") <(printf '%s\n' "$b") | awk -F'|' '$1 == $2' | wc -l)
((same == 0)) || fail "$same of $n cases have the same errors with ${flags[*]}"
echo "verify_changes: OK: $n cases changed"
