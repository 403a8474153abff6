#!/bin/sh
# Runs a command that must fail, and fail cleanly. Passes when the command exits non-zero, its
# output (stdout and stderr together) matches REGEX (grep -E), and each option given holds:
#   --status N       the exit status is exactly N
#   --one-line       the output is exactly one line (a message, no crash or stack trace)
#   --within SECONDS the command ended within SECONDS
# Usage: expect_failure.sh [--status N] [--one-line] [--within SECONDS] REGEX COMMAND [ARGS...]
status_want=
one_line=
within=
while :; do
  case $1 in
    --status) status_want=$2; shift 2 ;;
    --one-line) one_line=1; shift ;;
    --within) within=$2; shift 2 ;;
    *) break ;;
  esac
done
regex=$1
shift
start=$(date +%s)
output=$("$@" 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
printf '%s\n' "$output"
echo "expect_failure: exit status $status after ${elapsed} s"
fail() { echo "expect_failure: FAIL: $1"; exit 1; }
[ "$status" -ne 0 ] || fail "the command succeeded but was expected to fail"
if [ -n "$status_want" ] && [ "$status" -ne "$status_want" ]; then
  fail "expected exit status $status_want"
fi
if [ -n "$one_line" ]; then
  lines=$(printf '%s\n' "$output" | wc -l)
  [ "$lines" -eq 1 ] || fail "expected one line of output, got $lines"
fi
printf '%s\n' "$output" | grep -Eq "$regex" || fail "output does not match /$regex/"
if [ -n "$within" ] && [ "$elapsed" -gt "$within" ]; then
  fail "took ${elapsed} s, more than ${within} s"
fi
echo "expect_failure: OK"
