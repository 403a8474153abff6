#!/bin/sh
# `cpattn generate` on a checkpoint of a short `cpattn train --save` run: the output is the prompt
# followed by --tokens bytes, the same seed gives the same text, and a missing checkpoint is an
# error line. Usage: generate_run.sh OUTDIR CPATTN
outdir=$1
cpattn=$2
fail() { echo "generate_run: FAIL: $1"; exit 1; }
rm -rf "$outdir" && mkdir -p "$outdir" || exit 1
"$cpattn" train --cp 2 --layers 2 --d-model 16 --heads 2 --kv-heads 1 --seq 48 --batch 2 \
  --steps 30 --save "$outdir/ck" > "$outdir/train.out" 2>&1 || fail "training: $(cat "$outdir/train.out")"
gen() { "$cpattn" generate --resume "$outdir/ck" --prompt "the " --tokens 40 "$@"; }
a=$(gen --seed 1 --temperature 0.8 --top-k 20) || fail "generate exited $?"
b=$(gen --seed 1 --temperature 0.8 --top-k 20) || fail "generate exited $?"
c=$(gen --seed 2 --temperature 0.8 --top-k 20) || fail "generate exited $?"
printf '%s\n' "$a"
[ "$a" = "$b" ] || fail "the same seed gave different text"
[ "$a" != "$c" ] || fail "seeds 1 and 2 gave the same text"
case $a in "the "*) ;; *) fail "the output does not start with the prompt" ;; esac
[ "$(printf '%s' "$a" | wc -c)" -eq 44 ] || fail "expected 4 + 40 bytes"
out=$("$cpattn" generate --resume "$outdir/none" --prompt x 2>&1)
[ $? -eq 18 ] || fail "a missing checkpoint must exit 18"
printf '%s\n' "$out" | grep -q "^cpattn: error (io): --resume checkpoint '$outdir/none/checkpoint.bin': cannot open" ||
  fail "unexpected message: $out"
echo "generate_run: OK"
