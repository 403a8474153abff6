#!/bin/sh
# Runs a command that must fail cleanly: passes when it exits with STATUS and prints exactly one
# line (stdout and stderr together) matching REGEX (grep -E), with no crash or stack trace.
# Usage: expect_error.sh STATUS REGEX COMMAND [ARGS...]
expected=$1
regex=$2
shift 2
output=$("$@" 2>&1)
status=$?
printf '%s\n' "$output"
echo "expect_error: exit status $status"
if [ "$status" -ne "$expected" ]; then
  echo "expect_error: FAIL: expected exit status $expected"
  exit 1
fi
lines=$(printf '%s\n' "$output" | wc -l)
if [ "$lines" -ne 1 ]; then
  echo "expect_error: FAIL: expected one line of output, got $lines"
  exit 1
fi
if ! printf '%s\n' "$output" | grep -Eq "$regex"; then
  echo "expect_error: FAIL: output does not match /$regex/"
  exit 1
fi
echo "expect_error: OK"
