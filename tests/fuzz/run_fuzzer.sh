#!/bin/sh
# Runs one libFuzzer target for a bounded time (test fuzz.<name>, tests/fuzz/tests.cmake): on a
# fresh copy of its seed corpus (new inputs stay in the work directory), with a 10 s per-input
# timeout and a 2 GiB memory limit; a crash, hang, leak or sanitizer report fails the test and
# leaves its input in WORKDIR (crash-*, timeout-*, leak-*, oom-*: add it to the corpus as a
# regression input). Ends with "fuzz: OK: NAME: EXECS executions in S s, coverage C edges, F features".
# Usage: run_fuzzer.sh TARGET CORPUS WORKDIR SECONDS
target=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
corpus=$2
work=$3
seconds=$4
name=$(basename "$target")
rm -rf "$work" && mkdir -p "$work/corpus" || exit 1
cp "$corpus"/* "$work/corpus/" || exit 1
cd "$work" || exit 1
"$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/" corpus > log.txt 2>&1
status=$?
tail -n 40 log.txt
if [ $status -ne 0 ]; then
  echo "fuzz: FAIL: $name: exit $status; the input is in $work ($(ls "$work" | grep -E '^(crash|timeout|leak|oom|slow-unit)-' | tr '\n' ' '))"
  exit 1
fi
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' log.txt)
cov=$(grep -Eo 'cov: [0-9]+' log.txt | tail -n 1 | cut -d' ' -f2)
ft=$(grep -Eo 'ft: [0-9]+' log.txt | tail -n 1 | cut -d' ' -f2)
echo "fuzz: OK: $name: $execs executions in $seconds s, coverage $cov edges, $ft features"
