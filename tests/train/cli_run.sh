#!/bin/sh
# Runs a short `cpattn train ... --check --json --metrics --plot` and checks what it leaves: exit
# status 0, the JSON summary (check passed, no live ForwardResults), one metrics line per step and
# a PNG. Usage: cli_run.sh OUTDIR STEPS COMMAND [ARGS...] (COMMAND must run cpattn train with
# --steps STEPS; this script appends the output options).
outdir=$1
steps=$2
shift 2
mkdir -p "$outdir" || exit 1
rm -f "$outdir/metrics.jsonl" "$outdir/loss.png" "$outdir/summary.json"
"$@" --check --json --metrics "$outdir/metrics.jsonl" --plot "$outdir/loss.png" \
  > "$outdir/summary.json"
status=$?
cat "$outdir/summary.json"
fail() { echo "cli_run: FAIL: $1"; exit 1; }
[ "$status" -eq 0 ] || fail "exit status $status"
grep -q '"live_forward_results": 0' "$outdir/summary.json" || fail "live ForwardResults"
grep -q '"passed": true' "$outdir/summary.json" || fail "check did not pass"
grep -q '"final_loss": [0-9]' "$outdir/summary.json" || fail "no final loss"
lines=$(wc -l < "$outdir/metrics.jsonl")
[ "$lines" -eq "$steps" ] || fail "metrics has $lines lines, expected $steps"
grep -q '"tokens_per_s"' "$outdir/metrics.jsonl" || fail "metrics lines lack tokens_per_s"
head -c 4 "$outdir/loss.png" | grep -q 'PNG' || fail "loss.png is not a PNG"
echo "cli_run: OK"
