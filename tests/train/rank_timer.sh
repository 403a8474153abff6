#!/bin/sh
# One rank of an mpirun fault test: runs COMMAND, then prints "rank R: exit S after T s" on stderr
# (R = OMPI_COMM_WORLD_RANK). Rank 1 can be started differently:
#   --rank1-args "ARGS"  appends ARGS (split on spaces) to rank 1's command line
#   --rank1-signal SIG --after S   sends SIG (STOP, KILL, ...) to rank 1's command S s after start
# Usage: rank_timer.sh [--rank1-args ARGS] [--rank1-signal SIG --after S] COMMAND [ARGS...]
extra=
sig=
after=0
while :; do
  case $1 in
    --rank1-args) extra=$2; shift 2 ;;
    --rank1-signal) sig=$2; shift 2 ;;
    --after) after=$2; shift 2 ;;
    *) break ;;
  esac
done
rank=${OMPI_COMM_WORLD_RANK:-0}
if [ "$rank" = 1 ]; then
  # shellcheck disable=SC2086
  set -- "$@" $extra
else
  sig=
fi
start=$(date +%s.%N)
if [ -n "$sig" ]; then
  "$@" &
  pid=$!
  sleep "$after"
  kill "-$sig" "$pid"
  echo "rank $rank: sent SIG$sig to its cpattn after $after s" >&2
  wait "$pid"
  status=$?
else
  "$@"
  status=$?
fi
end=$(date +%s.%N)
echo "rank $rank: exit $status after $(awk "BEGIN { printf \"%.2f\", $end - $start }") s" >&2
exit "$status"
