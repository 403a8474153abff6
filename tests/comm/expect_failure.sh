#!/bin/sh
# Runs a command that must fail: passes when it exits non-zero within MAX_SECONDS and its output
# matches REGEX (grep -E). Usage: expect_failure.sh MAX_SECONDS REGEX COMMAND [ARGS...]
max_seconds=$1
regex=$2
shift 2
start=$(date +%s)
output=$("$@" 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
printf '%s\n' "$output"
echo "expect_failure: exit status $status after ${elapsed} s"
if [ "$status" -eq 0 ]; then
  echo "expect_failure: FAIL: the command succeeded but was expected to fail"
  exit 1
fi
if ! printf '%s\n' "$output" | grep -Eq "$regex"; then
  echo "expect_failure: FAIL: output does not match /$regex/"
  exit 1
fi
if [ "$elapsed" -gt "$max_seconds" ]; then
  echo "expect_failure: FAIL: took ${elapsed} s, more than ${max_seconds} s"
  exit 1
fi
echo "expect_failure: OK"
