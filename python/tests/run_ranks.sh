#!/bin/sh
# Runs N copies of a ProcessGroup test program as the ranks of one group: copy r runs
#   PROGRAM r N STORE [ARGS...]
# with STORE a c10d FileStore file in a fresh temporary folder (removed afterwards). Passes (exit
# 0) when every rank exits 0. When a rank fails, the others have 10 seconds to end before they
# are killed; every rank still running after LIMIT seconds is killed.
# Usage: run_ranks.sh N LIMIT PROGRAM [ARGS...]
set -u
if [ $# -lt 3 ]; then
  echo "usage: run_ranks.sh N LIMIT PROGRAM [ARGS...]" >&2
  exit 2
fi
n=$1
limit=$2
program=$3
shift 3
dir=$(mktemp -d "${TMPDIR:-/tmp}/cpattn-ranks-XXXXXX") || exit 2
trap 'rm -rf "$dir"' EXIT
trap 'exit 1' HUP INT TERM

# Each rank in a subshell that records the program's pid (to kill it) and its exit status.
r=0
while [ "$r" -lt "$n" ]; do
  (
    "$program" "$r" "$n" "$dir/store" "$@" &
    echo $! >"$dir/pid.$r"
    wait $!
    echo $? >"$dir/rc.$r.tmp"
    mv "$dir/rc.$r.tmp" "$dir/rc.$r"
  ) &
  r=$((r + 1))
done

start=$(date +%s)
failed_at=
status=0
for_each_rank() {  # for_each_rank FUNCTION: calls FUNCTION r for every rank
  k=0
  while [ "$k" -lt "$n" ]; do
    "$1" "$k"
    k=$((k + 1))
  done
}
running=0
check_rank() {
  if [ ! -f "$dir/rc.$1" ]; then
    running=$((running + 1))
    return
  fi
  [ -f "$dir/seen.$1" ] && return
  : >"$dir/seen.$1"
  rc=$(cat "$dir/rc.$1")
  if [ "$rc" -ne 0 ]; then
    echo "run_ranks: rank $1 of $n exited with status $rc"
    status=1
    [ -n "$failed_at" ] || failed_at=$(date +%s)
  fi
}
kill_rank() {
  if [ ! -f "$dir/rc.$1" ] && [ -f "$dir/pid.$1" ]; then
    echo "run_ranks: killing rank $1 of $n"
    kill -9 "$(cat "$dir/pid.$1")" 2>/dev/null
  fi
}
while :; do
  running=0
  for_each_rank check_rank
  [ "$running" -eq 0 ] && break
  now=$(date +%s)
  if [ $((now - start)) -ge "$limit" ] ||
    { [ -n "$failed_at" ] && [ $((now - failed_at)) -ge 10 ]; }; then
    [ $((now - start)) -ge "$limit" ] && echo "run_ranks: still running after $limit s"
    for_each_rank kill_rank
    status=1
    wait
    break
  fi
  sleep 0.2
done
wait
exit $status
