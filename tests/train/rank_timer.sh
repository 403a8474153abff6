#!/bin/sh
# One rank of an mpirun fault test: runs COMMAND, then prints "rank R: exit S after T s" on stderr
# (R = OMPI_COMM_WORLD_RANK). Rank 1 can be started differently:
#   --rank1-args "ARGS"  appends ARGS (split on spaces) to rank 1's command line
#   --rank1-signal SIG --after S   sends SIG (STOP, KILL, ...) to rank 1's command S s after start
#   --once FILE   ... and not before FILE exists (waits up to 120 s more: a loaded machine may
#                 need longer than S to get there)
# Usage: rank_timer.sh [--rank1-args ARGS] [--rank1-signal SIG --after S [--once FILE]] COMMAND...
extra=
sig=
after=0
once=
while :; do
  case $1 in
    --rank1-args) extra=$2; shift 2 ;;
    --rank1-signal) sig=$2; shift 2 ;;
    --after) after=$2; shift 2 ;;
    --once) once=$2; shift 2 ;;
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
  if [ -n "$once" ]; then
    waited=0
    while [ ! -e "$once" ] && [ "$waited" -lt 1200 ]; do
      sleep 0.1
      waited=$((waited + 1))
    done
  fi
  kill "-$sig" "$pid"
  sent=$(awk "BEGIN { printf \"%.2f\", $(date +%s.%N) - $start }")
  echo "rank $rank: sent SIG$sig to its cpattn after $sent s" >&2
  wait "$pid"
  status=$?
else
  "$@"
  status=$?
fi
end=$(date +%s.%N)
echo "rank $rank: exit $status after $(awk "BEGIN { printf \"%.2f\", $end - $start }") s" >&2
exit "$status"
