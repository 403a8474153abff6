#!/bin/sh
# The fault matrix of `cpattn train` (docs/reliability.md): one fault per case, injected into a
# short run with a 5 s deadline (--timeout 5). Each case asserts that the fault is detected (the
# expected exit status and message), on every rank, within its time bound (deadline + 5 s, or 5 s
# for faults found at start-up), and what was kept (the text intact, a checkpoint that loads, a
# resumed run bitwise equal to an uninterrupted one). It ends with one line
#   fault-matrix | CASE | detected yes | exit S | time to error: rank 0 T s, rank 1 T s | kept: ...
# Usage: faults.sh CASE WORKDIR CPATTN [MPIRUN ARGS...]   (MPI cases need the mpirun command,
# ending with its process-count flag, e.g. "mpirun --oversubscribe -n")
case_name=$1
work=$2
cpattn=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
deadline=5
tiny="--layers 2 --d-model 16 --heads 2 --kv-heads 1 --seq 48 --batch 2 --warmup 2 --timeout $deadline"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
cp /usr/share/common-licenses/GPL-3 text.txt || exit 1

fail() {
  echo "faults: FAIL: $case_name: $1"
  exit 1
}
now() { date +%s.%N; }
seconds_since() { awk "BEGIN { printf \"%.2f\", $(now) - $1 }"; }
# run OUT COMMAND...: runs COMMAND with stdout and stderr into OUT; sets $status and $elapsed.
run() {
  out=$1
  shift
  t0=$(now)
  "$@" > "$out" 2>&1
  status=$?
  elapsed=$(seconds_since "$t0")
  cat "$out"
}
expect_status() { [ "$status" -eq "$1" ] || fail "exit status $status, expected $1"; }
expect_output() { grep -Eq "$2" "$1" || fail "no line matching /$2/ in $1"; }
expect_within() {
  awk "BEGIN { exit !($elapsed <= $1) }" || fail "took $elapsed s, more than $1 s"
}
# When rank_timer.sh sent its signal (seconds after start; at least its --after).
signal_time() { sed -n 's/^rank 1: sent SIG[A-Z]* to its cpattn after \([0-9.]*\) s$/\1/p' "$1"; }
# The time bound of a fault injected by rank_timer.sh: its signal time + $1 seconds.
expect_within_after_signal() {
  expect_within "$(awk "BEGIN { print $(signal_time out.txt) + $1 }")"
}
# The per-rank times printed by rank_timer.sh ("rank R: exit S after T s"), or, for a rank that
# mpirun ended, the job's end.
rank_times() {
  times=
  for r in 0 1; do
    t=$(sed -n "s/^rank $r: exit [0-9]* after \([0-9.]*\) s$/\1/p" "$1" | tail -n 1)
    [ -n "$t" ] || t="$elapsed (ended by mpirun)"
    times="$times${times:+, }rank $r $t s"
  done
  echo "$times"
}
# Every rank must have printed the error line itself (the job did not just die).
expect_every_rank() {
  n=$(grep -Ec "$2" "$1")
  [ "$n" -ge 2 ] || fail "$n rank(s) printed /$2/, expected both"
}
row() { echo "fault-matrix | $case_name | detected yes | exit $status | time to error: $1 | kept: $2"; }
text_intact() { cmp -s text.txt /usr/share/common-licenses/GPL-3 || fail "the --text file changed"; }
# checkpoint_loads DIR: the checkpoint can be generated from (so it decodes and checksums).
checkpoint_loads() {
  "$cpattn" generate --resume "$1" --prompt "the " --tokens 4 --seed 1 > gen.out 2>&1 ||
    fail "the checkpoint in $1 does not load: $(cat gen.out)"
}
# mismatch_case FLAG RANK0_VALUE RANK1_VALUE MPIRUN...: rank 1 is started with FLAG RANK1_VALUE,
# rank 0 with the default RANK0_VALUE; every rank must fail in the first seconds naming it.
mismatch_case() {
  flag=$1
  v0=$2
  v1=$3
  shift 3
  [ $# -gt 0 ] || fail "needs the mpirun command"
  # shellcheck disable=SC2086
  run out.txt "$@" 2 sh "$here/rank_timer.sh" --rank1-args "$flag $v1" \
    "$cpattn" train --backend mpi $tiny
  expect_status 20
  expect_every_rank out.txt "^cpattn: error \(rank_disagreement\): cpattn train: the ranks were started with different settings: rank 0 has $flag $v0, rank 1 has $v1"
  expect_within 5
  row "$(rank_times out.txt)" "nothing trained (fails before --check and training)"
}

case $case_name in
  mismatch_text)
    head -c 20000 text.txt > other.txt
    # shellcheck disable=SC2086
    run out.txt "$@" 2 sh "$here/rank_timer.sh" --rank1-args "--text other.txt" \
      "$cpattn" train --backend mpi $tiny --steps 50
    expect_status 20
    expect_every_rank out.txt "rank 0 has --text /usr/share/common-licenses/GPL-3 \(35149 bytes, digest [0-9a-f]+\), rank 1 has other.txt \(20000 bytes"
    expect_within 5
    row "$(rank_times out.txt)" "nothing trained"
    ;;
  mismatch_layout) mismatch_case --layout zigzag striped "$@" ;;
  mismatch_dropout) mismatch_case --dropout 0.1 0.2 "$@" ;;
  mismatch_seed) mismatch_case --seed 0 7 "$@" ;;
  mismatch_lr) mismatch_case --lr 0.003 0.001 "$@" ;;
  mismatch_steps)
    # shellcheck disable=SC2086
    run out.txt "$@" 2 sh "$here/rank_timer.sh" --rank1-args "--lr 0.003" \
      "$cpattn" train --backend mpi $tiny --steps 50
    [ "$status" -eq 0 ] || fail "an equal --lr must agree (exit $status)"
    # rank 0 keeps the default --steps 200; rank 1 is given 7
    mismatch_case --steps 200 7 "$@"
    ;;
  mismatch_layers)
    small="--d-model 16 --heads 2 --kv-heads 1 --seq 48 --batch 2 --warmup 2 --timeout $deadline"
    # shellcheck disable=SC2086
    run out.txt "$@" 2 sh "$here/rank_timer.sh" --rank1-args "--layers 3" \
      "$cpattn" train --backend mpi $small --steps 50
    expect_status 20
    expect_every_rank out.txt "rank 0 has --layers 2, rank 1 has 3"
    expect_within 5
    row "$(rank_times out.txt)" "nothing trained"
    ;;
  mismatch_causal)
    # verify --backend mpi: a rank verifying another mask would check another problem.
    run out.txt "$@" 2 sh "$here/rank_timer.sh" --rank1-args "--causal" \
      "$cpattn" verify --backend mpi --cp 2 --seq 64 --timeout "$deadline"
    expect_status 20
    expect_every_rank out.txt "cpattn verify: the ranks were started with different settings: rank 0 has --causal off, rank 1 has on"
    expect_within 5
    row "$(rank_times out.txt)" "nothing verified"
    ;;
  missing_text_one_rank)
    # shellcheck disable=SC2086
    run out.txt "$@" 2 sh "$here/rank_timer.sh" --rank1-args "--text /nonexistent.txt" \
      "$cpattn" train --backend mpi $tiny --steps 50
    expect_status 18
    expect_every_rank out.txt "^cpattn: error \(io\): rank 1: text file '/nonexistent.txt': cannot open"
    expect_within 5
    row "$(rank_times out.txt)" "nothing trained"
    ;;
  stopped_rank)
    # SIGSTOP on rank 1 after 2 s of a long run: rank 0's next wait times out.
    # shellcheck disable=SC2086
    run out.txt "$@" 2 sh "$here/rank_timer.sh" --rank1-signal STOP --after 2 --once ck/checkpoint.bin \
      "$cpattn" train --backend mpi $tiny --steps 1000000 --save ck --save-every 20
    expect_status 15
    # (in whichever wait comes next: a ring message or the per-step allreduce)
    expect_output out.txt "^cpattn: rank 0: error \(timeout\): ((allreduce_sum|all_to_all): )?rank 0: timed out after 5 s waiting for"
    expect_within_after_signal $((deadline + 5))
    checkpoint_loads ck
    row "$(rank_times out.txt) (rank 1 stopped at 2 s)" "checkpoint of the last --save-every step (loads)"
    ;;
  stopped_rank_check)
    # The same during --check (which once raised the deadline to 24 h): every process computes
    # its own cp=1 reference, so the group's waits keep the 5 s deadline.
    run out.txt "$@" 2 sh "$here/rank_timer.sh" --rank1-signal STOP --after 1 \
      "$cpattn" train --backend mpi --check --seq 512 --steps 1000000 --timeout "$deadline"
    expect_status 15
    expect_output out.txt "^cpattn: rank 0: error \(timeout\)"
    expect_within $((1 + deadline + 5))
    row "$(rank_times out.txt) (rank 1 stopped at 1 s)" "nothing (stopped during --check)"
    ;;
  killed_rank)
    # shellcheck disable=SC2086
    run out.txt "$@" 2 sh "$here/rank_timer.sh" --rank1-signal KILL --after 2 --once ck/checkpoint.bin \
      "$cpattn" train --backend mpi $tiny --steps 1000000 --save ck --save-every 20
    [ "$status" -ne 0 ] || fail "the job succeeded"
    expect_within_after_signal $((deadline + 5))
    checkpoint_loads ck
    row "$(rank_times out.txt) (rank 1 killed at 2 s)" "checkpoint of the last --save-every step (loads)"
    ;;
  sigterm_one_rank)
    # A scheduler's SIGTERM on one rank: every rank stops at the same step, rank 0 saves.
    # shellcheck disable=SC2086
    run out.txt "$@" 2 sh "$here/rank_timer.sh" --rank1-signal TERM --after 2 \
      "$cpattn" train --backend mpi $tiny --steps 1000000 --save ck --save-every 0
    expect_status 143
    expect_output out.txt "^cpattn: terminated at step [0-9]+; checkpoint of step [0-9]+ saved to ck/checkpoint.bin"
    expect_output out.txt "^rank 0: exit 143 after"
    expect_output out.txt "^rank 1: exit 143 after"
    expect_within $((2 + deadline))
    checkpoint_loads ck
    row "$(rank_times out.txt) (SIGTERM to rank 1 at 2 s)" "checkpoint of the stop step (loads)"
    ;;
  mpirun_without_backend)
    # shellcheck disable=SC2086
    run out.txt "$@" 2 sh "$here/rank_timer.sh" "$cpattn" train $tiny --steps 50 --metrics m.jsonl
    expect_status 11
    expect_every_rank out.txt "^cpattn: error \(invalid_argument\): cpattn train was started as one of 2 mpirun processes without --backend mpi"
    [ ! -e m.jsonl ] || fail "a metrics file was written"
    expect_within 5
    row "$(rank_times out.txt)" "nothing written"
    ;;
  nan_loss)
    # shellcheck disable=SC2086
    run out.txt "$cpattn" train --cp 2 $tiny --steps 50 --lr 1e6 --save ck
    expect_status 22
    expect_output out.txt "^cpattn: error \(numeric\): non-finite (loss|gradient norm) .* at step [0-9]+.*; training stopped \(--on-nonfinite stop\); checkpoint of step [0-9]+ saved"
    expect_within 5
    checkpoint_loads ck
    row "rank 0 $elapsed s, rank 1 (in-process) same" "checkpoint of the last finite step (loads); summary printed"
    ;;
  full_disk)
    # A full file system: a one-page tmpfs, filled, mounted in a mount namespace of this run's own
    # (needs root; /dev/full itself is refused up front, as every device is).
    mkdir full
    cat > full_run.sh <<EOF
mount -t tmpfs -o size=4k tmpfs full || exit 97
dd if=/dev/zero of=full/filler bs=4k count=4 2>/dev/null
exec "$cpattn" train --cp 2 $tiny --steps 50 --metrics full/metrics.jsonl --save ck
EOF
    run out.txt unshare --mount sh full_run.sh
    [ "$status" -ne 97 ] || fail "cannot mount a tmpfs for the full disk (the fault matrix runs as root)"
    expect_status 18
    expect_output out.txt "^cpattn: error \(io\): writing --metrics 'full/metrics.jsonl' failed at step 1: No space left on device; training stopped at step 1; checkpoint of step 1 saved"
    expect_output out.txt "^final loss"
    expect_within 5
    checkpoint_loads ck
    row "rank 0 $elapsed s (at step 1)" "checkpoint of step 1 (loads); summary printed"
    ;;
  metrics_is_text)
    # shellcheck disable=SC2086
    run out.txt "$cpattn" train --cp 2 $tiny --steps 5 --text text.txt --metrics ./text.txt
    expect_status 11
    expect_output out.txt "^cpattn: error \(invalid_argument\): --metrics './text.txt' is the --text file: refusing to overwrite an input$"
    expect_within 5
    text_intact
    row "$elapsed s (start-up)" "--text intact"
    ;;
  plot_is_text)
    ln -s text.txt link.png
    # shellcheck disable=SC2086
    run out.txt "$cpattn" train --cp 2 $tiny --steps 5 --text text.txt --plot link.png
    expect_status 11
    expect_output out.txt "^cpattn: error \(invalid_argument\): --plot 'link.png' is the --text file"
    expect_within 5
    text_intact
    row "$elapsed s (start-up)" "--text intact"
    ;;
  plot_unwritable)
    echo keep > old.png
    # shellcheck disable=SC2086
    run out.txt "$cpattn" train --cp 2 $tiny --steps 5 --plot /nonexistent/dir/loss.png
    expect_status 18
    expect_output out.txt "^cpattn: error \(io\): --plot '/nonexistent/dir/loss.png': directory '/nonexistent/dir' does not exist$"
    ! grep -q "^step 1/" out.txt || fail "training ran before the --plot check"
    # An existing plot is not emptied at start-up.
    run out2.txt env PATH=/nonexistent "$cpattn" train --cp 2 $tiny --steps 5 --plot old.png
    expect_status 18
    expect_output out2.txt "^cpattn: error \(io\): --plot needs gnuplot, which is not in PATH"
    [ "$(cat old.png)" = keep ] || fail "old.png was changed"
    expect_within 5
    row "$elapsed s (before training)" "existing --plot file untouched"
    ;;
  plot_onto_special_files)
    # Outputs go to regular files or new paths only: a device and a FIFO are refused before any
    # training and stay what they were (a device node of our own, /dev/full's numbers, when
    # mknod is allowed), and so is a directory that accepts no file (/proc, where root passes
    # access(W_OK)).
    mkfifo out.fifo || fail "mkfifo"
    # shellcheck disable=SC2086
    run out.txt "$cpattn" train --cp 2 $tiny --steps 5 --plot out.fifo
    expect_status 18
    expect_output out.txt "^cpattn: error \(io\): --plot 'out.fifo' is a FIFO, not a regular file: refusing to write over it$"
    [ -p out.fifo ] || fail "out.fifo was replaced"
    # shellcheck disable=SC2086
    run out2.txt "$cpattn" train --cp 2 $tiny --steps 5 --metrics out.fifo
    expect_status 18
    expect_output out2.txt "^cpattn: error \(io\): --metrics 'out.fifo' is a FIFO, not a regular file"
    kept="FIFO kept"
    if mknod full.dev c 1 7 2>/dev/null; then
      # shellcheck disable=SC2086
      run out3.txt "$cpattn" train --cp 2 $tiny --steps 5 --plot full.dev
      expect_status 18
      expect_output out3.txt "^cpattn: error \(io\): --plot 'full.dev' is a device, not a regular file"
      [ -c full.dev ] || fail "the device node full.dev was replaced"
      kept="$kept, device node kept"
    fi
    # shellcheck disable=SC2086
    run out4.txt "$cpattn" train --cp 2 $tiny --steps 5 --plot /proc/cpattn-loss.png
    expect_status 18
    expect_output out4.txt "^cpattn: error \(io\): --plot '/proc/cpattn-loss.png': cannot create a file in directory '/proc'"
    ! grep -q "^step 1/" out.txt out2.txt out4.txt || fail "training ran before the output check"
    expect_within 5
    row "$elapsed s (before training)" "$kept"
    ;;
  fifo_text)
    mkfifo fifo.txt || fail "mkfifo"
    # shellcheck disable=SC2086
    run out.txt "$cpattn" train --cp 2 $tiny --text fifo.txt
    expect_status 11
    expect_output out.txt "^cpattn: error \(invalid_argument\): text file 'fifo.txt' is not a regular file \(a FIFO\)$"
    expect_within 5
    row "$elapsed s (start-up)" "nothing read"
    ;;
  sigint_resume | sigterm_resume)
    sig=INT
    want=130
    word=interrupted
    if [ "$case_name" = sigterm_resume ]; then
      sig=TERM
      want=143
      word=terminated
    fi
    run_args="--cp 2 $tiny --steps 400 --eval-every 50"
    # shellcheck disable=SC2086
    "$cpattn" train $run_args --json --metrics whole.jsonl > whole.json 2>/dev/null ||
      fail "the uninterrupted run failed"
    # shellcheck disable=SC2086
    "$cpattn" train $run_args --save ck --save-every 0 --metrics a.jsonl > a.out 2> a.err &
    pid=$!
    i=0
    while [ "$(cat a.jsonl 2>/dev/null | wc -l)" -lt 20 ] && [ $i -lt 600 ]; do
      sleep 0.05
      i=$((i + 1))
    done
    t0=$(now)
    kill "-$sig" "$pid"
    wait "$pid"
    status=$?
    elapsed=$(seconds_since "$t0")
    cat a.err
    expect_status "$want"
    expect_output a.err "^cpattn: $word at step [0-9]+; checkpoint of step [0-9]+ saved to ck/checkpoint.bin$"
    expect_output a.out "^run ended +$word after step"
    expect_within 5
    stopped=$(sed -n "s/^cpattn: $word at step \([0-9]*\);.*/\1/p" a.err)
    [ "$stopped" -lt 400 ] || fail "the run was not interrupted (step $stopped)"
    stop_status=$status
    stop_elapsed=$elapsed
    # shellcheck disable=SC2086
    "$cpattn" train $run_args --resume ck --save ck --json --metrics b.jsonl > b.json 2>/dev/null ||
      fail "the resumed run failed"
    want_digest=$(sed -n 's/.*"weight_digest": "\([0-9a-f]*\)".*/\1/p' whole.json)
    got_digest=$(sed -n 's/.*"weight_digest": "\([0-9a-f]*\)".*/\1/p' b.json)
    [ -n "$want_digest" ] || fail "no weight digest in whole.json"
    [ "$want_digest" = "$got_digest" ] || fail "weights differ: $got_digest vs $want_digest"
    # Every loss after the resume (and every held-out loss) equals the uninterrupted run's.
    # (timings removed; the rest of every line, loss and held-out loss included, must be equal)
    sed -E 's/"(elapsed_s|tokens_per_s)":[^,}]*,?//g' whole.jsonl |
      awk -F'"step":' -v s="$stopped" '{ split($2, a, ","); if (a[1] + 0 > s) print }' > want.txt
    sed -E 's/"(elapsed_s|tokens_per_s)":[^,}]*,?//g' b.jsonl > got.txt
    cmp -s want.txt got.txt || fail "losses after the resume differ from the uninterrupted run"
    [ "$(wc -l < got.txt)" -eq $((400 - stopped)) ] || fail "resumed run has $(wc -l < got.txt) steps"
    status=$stop_status
    elapsed=$stop_elapsed
    row "rank 0 $elapsed s after SIG$sig (in-process ranks stop at the same step)" "checkpoint of step $stopped; resumed run bitwise equal (losses of steps $((stopped + 1))-400, weights $got_digest)"
    ;;
  sigterm_inside_step)
    # A SIGTERM in the middle of a long step (about 3 s here) reaches the kernel's interruption
    # points: the job stops within 1 s, saves the state of the last finished step, and a run
    # resumed from it is bitwise equal to an uninterrupted one.
    run_args="--cp 2 --layers 2 --d-model 64 --heads 2 --kv-heads 1 --seq 12288 --batch 2 --steps 2"
    # shellcheck disable=SC2086
    "$cpattn" train $run_args --json > whole.json 2>/dev/null || fail "the uninterrupted run failed"
    # shellcheck disable=SC2086
    "$cpattn" train $run_args --save ck --metrics a.jsonl > a.out 2> a.err &
    pid=$!
    i=0
    while [ "$(cat a.jsonl 2>/dev/null | wc -l)" -lt 1 ] && [ $i -lt 1200 ]; do
      sleep 0.05
      i=$((i + 1))
    done
    sleep 0.5
    t0=$(now)
    kill -TERM "$pid"
    wait "$pid"
    status=$?
    elapsed=$(seconds_since "$t0")
    cat a.err
    expect_status 143
    expect_output a.err "^cpattn: terminated at step 1; checkpoint of step 1 saved to ck/checkpoint.bin$"
    expect_output a.out "^run ended +terminated after step 1 of 2"
    expect_within 1
    stop_elapsed=$elapsed
    # shellcheck disable=SC2086
    "$cpattn" train $run_args --resume ck --json > b.json 2>/dev/null || fail "the resumed run failed"
    want_digest=$(sed -n 's/.*"weight_digest": "\([0-9a-f]*\)".*/\1/p' whole.json)
    got_digest=$(sed -n 's/.*"weight_digest": "\([0-9a-f]*\)".*/\1/p' b.json)
    [ -n "$want_digest" ] || fail "no weight digest in whole.json"
    [ "$want_digest" = "$got_digest" ] || fail "weights differ: $got_digest vs $want_digest"
    status=143
    elapsed=$stop_elapsed
    row "$elapsed s after SIGTERM inside step 2" "checkpoint of step 1; resumed run bitwise equal (weights $got_digest)"
    ;;
  corrupted_checkpoint)
    # shellcheck disable=SC2086
    "$cpattn" train --cp 2 $tiny --steps 5 --save ck > /dev/null 2>&1 || fail "the run failed"
    mkdir -p bad truncated
    size=$(wc -c < ck/checkpoint.bin)
    head -c $((size - 1000)) ck/checkpoint.bin > truncated/checkpoint.bin
    cp ck/checkpoint.bin bad/checkpoint.bin
    printf 'X' | dd of=bad/checkpoint.bin bs=1 seek=$((size / 2)) conv=notrunc 2> /dev/null
    # shellcheck disable=SC2086
    run out.txt "$cpattn" train --cp 2 $tiny --steps 10 --resume bad
    expect_status 18
    expect_output out.txt "^cpattn: error \(io\): bad/checkpoint.bin is corrupted: checksum [0-9a-f]+, the file says [0-9a-f]+$"
    expect_within 5
    # shellcheck disable=SC2086
    run out2.txt "$cpattn" train --cp 2 $tiny --steps 10 --resume truncated
    expect_status 18
    expect_output out2.txt "^cpattn: error \(io\): truncated/checkpoint.bin is truncated: $((size - 1000)) bytes, its header says $size$"
    # shellcheck disable=SC2086
    run out3.txt "$cpattn" train --cp 2 $tiny --steps 5 --lr 0.01 --resume ck
    expect_status 11
    expect_output out3.txt "^cpattn: error \(invalid_argument\): --resume 'ck': the checkpoint was written by a run with other settings: --lr 0.003 in the checkpoint, 0.01 now$"
    # Another kernel arithmetic (CPATTN_ISA=generic: no fused multiply-adds) would not continue
    # the run bitwise.
    # shellcheck disable=SC2086
    run out4.txt env CPATTN_ISA=generic "$cpattn" train --cp 2 $tiny --steps 5 --resume ck
    expect_status 11
    expect_output out4.txt "^cpattn: error \(invalid_argument\): --resume 'ck': the checkpoint was written by a run with other settings: kernel.numerics not in the checkpoint, no-fma now$"
    status=18
    row "$elapsed s (start-up)" "the good checkpoint untouched"
    ;;
  save_onto_another_checkpoint)
    # A second run with --save onto the first run's checkpoint is refused before step 1 and the
    # checkpoint is left as it was; --overwrite replaces it, and a run resumed from it may too.
    # shellcheck disable=SC2086
    "$cpattn" train --cp 2 $tiny --steps 3 --save ck > /dev/null 2>&1 || fail "the first run failed"
    before=$(cksum < ck/checkpoint.bin)
    # shellcheck disable=SC2086
    run out.txt "$cpattn" train --cp 2 $tiny --steps 5 --lr 0.01 --save ck
    expect_status 11
    expect_output out.txt "^cpattn: error \(invalid_argument\): --save 'ck' holds a checkpoint already \(ck/checkpoint.bin\): refusing to replace another run's checkpoint; pass --overwrite to replace it, or --resume 'ck' to continue that run$"
    [ "$(wc -l < out.txt)" -eq 1 ] || fail "the refusal is not the only line printed"
    expect_within 5
    [ "$(cksum < ck/checkpoint.bin)" = "$before" ] || fail "the checkpoint was replaced"
    refused_elapsed=$elapsed
    # No other output may name the checkpoint a run resumes from.
    # shellcheck disable=SC2086
    run out2.txt "$cpattn" train --cp 2 $tiny --steps 5 --resume ck --metrics ck/checkpoint.bin
    expect_status 11
    expect_output out2.txt "^cpattn: error \(invalid_argument\): --metrics 'ck/checkpoint.bin' is the --resume checkpoint file: refusing to overwrite an input$"
    [ "$(cksum < ck/checkpoint.bin)" = "$before" ] || fail "--metrics replaced the resumed checkpoint"
    # A link left at the temporary path is replaced by the save, not written through.
    echo keep > victim.txt
    ln -s ../victim.txt ck/checkpoint.bin.tmp
    # shellcheck disable=SC2086
    "$cpattn" train --cp 2 $tiny --steps 3 --resume ck --save ck > /dev/null 2>&1 ||
      fail "the resumed run could not save onto its own checkpoint"
    [ "$(cat victim.txt)" = keep ] || fail "the save wrote through a link at its temporary path"
    [ ! -L ck/checkpoint.bin ] || fail "the checkpoint became a link"
    # shellcheck disable=SC2086
    "$cpattn" train --cp 2 $tiny --steps 2 --lr 0.01 --save ck --overwrite > /dev/null 2>&1 ||
      fail "--overwrite did not replace the checkpoint"
    checkpoint_loads ck
    status=11
    elapsed=$refused_elapsed
    row "$elapsed s (start-up)" "the other run's checkpoint untouched; --overwrite and --resume may replace it"
    ;;
  stdout_closed)
    # `cpattn train | head`: the write error is reported, the run stops and saves.
    t0=$(now)
    # shellcheck disable=SC2086
    { "$cpattn" train --cp 2 $tiny --steps 2000 --save ck 2> err.txt; echo $? > status.txt; } |
      head -c 1 > /dev/null
    elapsed=$(seconds_since "$t0")
    status=$(cat status.txt)
    cat err.txt
    expect_status 18
    expect_output err.txt "^cpattn: error \(io\): writing (the progress to stdout failed at step [0-9]+: Broken pipe; training stopped at step [0-9]+; checkpoint of step [0-9]+ saved|the summary to stdout failed: Broken pipe)"
    [ "$(grep -c '^cpattn: error' err.txt)" -eq 1 ] || fail "expected one error line"
    checkpoint_loads ck
    expect_within 5
    at=$(sed -n 's/.*training stopped at step \([0-9]*\);.*/\1/p' err.txt)
    row "$elapsed s (a 2000-step run stopped at step ${at:-?})" "checkpoint of that step (loads); error on stderr"
    ;;
  out_of_memory)
    # 8 layers of d_model 4096: about 6.4 GB of weights under a 1 GB address-space limit.
    run out.txt sh -c "ulimit -v 1000000 && exec '$cpattn' train --cp 1 --layers 8 --d-model 4096 --heads 32 --kv-heads 8 --seq 64 --batch 1 --steps 1"
    expect_status 30
    expect_output out.txt "^cpattn: error \(out_of_memory\): allocating the model's parameters: [0-9]+ floats \([0-9.]+ MiB\) failed while the process had [0-9.]+ MiB of address space and [0-9.]+ MiB resident \(peak [0-9.]+ MiB\), of which cpattn's counted buffers [0-9.]+ MiB \(peak [0-9.]+ MiB\); reduce --batch"
    expect_within 10
    row "$elapsed s" "nothing (fails at allocation)"
    ;;
  rank_threads_refused)
    # 1024 in-process ranks need 8 GiB of thread stacks: under a 7.6 GB address-space limit the
    # operating system refuses one, and every rank must stop at once (before: each started rank
    # waited for the missing ones until the deadline, then "Resource temporarily unavailable").
    run out.txt sh -c "ulimit -v 8000000 && exec '$cpattn' verify --cp 1024 --timeout 60"
    expect_status 21
    expect_output out.txt "^cpattn: error \(resource_exhausted\): run_ranks: the thread of rank [0-9]+ of 1024 could not be started: "
    expect_within 30
    row "$elapsed s (deadline 60 s)" "nothing (fails at start-up)"
    ;;
  *)
    fail "unknown case"
    ;;
esac
echo "faults: OK: $case_name"
