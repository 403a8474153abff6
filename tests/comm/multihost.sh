#!/bin/sh
# Multi-host test on one machine. Two network namespaces joined by a veth pair stand for two
# hosts, 169.254.77.1 (namespace a) and 169.254.77.2 (namespace b): link-local addresses on a link
# that reaches nothing else. mpirun runs in a with one rank on each host; its rsh launcher is an
# agent that starts the remote daemon with `ip netns exec b`, and every TCP use of OpenMPI (the
# daemons' out-of-band channel and the ranks' messages) is confined to 169.254.77.0/24. Across the
# link it runs the ring parity test (test_cp_mpi), `cpattn verify --backend mpi --cp 2` and a
# short `cpattn train --backend mpi --check`; each must pass, and the veth's byte counters must
# show that each run's data went over the link, both ways (printed).
#
# The transport is `btl self,tcp`: both namespaces share /dev/shm, so the shared-memory btl
# (vader) would join the ranks without the network; without it the veth is the only path.
#
# Usage (POSIX sh, as root): multihost.sh MPIRUN TEST_CP_MPI CPATTN
# Exit status: 0 passed, 1 failed, 77 skipped: the namespaces or the veth pair cannot be created
# (not root, no CAP_SYS_ADMIN, a container that forbids it), with the reason on one line.
# The namespaces (cpattn-mh-<pid>-a/-b) are removed on exit and on HUP, INT, PIPE (the reader of
# the output, e.g. ctest, is gone) and TERM; those left by a run killed with SIGKILL (ctest's
# timeout) are removed by the next run.
set -u
mpirun=$1 ring=$2 cli=$3
ip_a=169.254.77.1 ip_b=169.254.77.2 net=169.254.77.0/24
A=cpattn-mh-$$-a B=cpattn-mh-$$-b
limit=90          # seconds per mpirun; then TERM (mpirun ends its job on both hosts), KILL 10 s on
min_bytes=65536   # each way per run: MPI start-up alone moves ~4 KB, each run's k/v far more
child=

say() { echo "multihost: $*"; }
fail() { say "FAIL: $*"; exit 1; }
skip() { say "SKIPPED: $1 ($(printf '%s\n' "$2" | head -n 1))"; exit 77; }
cleanup() {
  if [ -n "$child" ]; then kill "$child" 2>/dev/null; wait "$child"; fi
  ip netns del "$A" 2>/dev/null; ip netns del "$B" 2>/dev/null; rm -rf "$tmp"
}

for ns in $(ip netns list 2>/dev/null | grep -o '^cpattn-mh-[0-9]*-[ab]'); do
  pid=${ns#cpattn-mh-}; kill -0 "${pid%-?}" 2>/dev/null || ip netns del "$ns" 2>/dev/null
done

tmp=$(mktemp -d) || fail "mktemp"
trap cleanup EXIT
trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 141' PIPE; trap 'exit 143' TERM

err=$({ ip netns add "$A" && ip netns add "$B"; } 2>&1) ||
  skip "cannot create network namespaces" "$err"
err=$(ip link add mh-a netns "$A" type veth peer name mh-b netns "$B" 2>&1) ||
  skip "cannot create a veth pair" "$err"
for side in "$A mh-a $ip_a" "$B mh-b $ip_b"; do
  set -- $side
  # IPv4 only: no IPv6 link-local address, so nothing but OpenMPI's traffic crosses the link.
  ip netns exec "$1" sysctl -qw "net.ipv6.conf.$2.disable_ipv6=1" 2>/dev/null
  { ip -n "$1" addr add "$3/24" dev "$2" && ip -n "$1" link set lo up &&
    ip -n "$1" link set "$2" up; } || fail "cannot configure $2 in $1"
done
say "namespaces $A ($ip_a, mh-a) and $B ($ip_b, mh-b)"

# mpirun, in a, knows 169.254.77.1 as itself and starts b's daemon with `AGENT HOST WORDS...`,
# WORDS being one shell command line quoted for a remote shell (as ssh would pass it on).
cat >"$tmp/rsh" <<EOF
#!/bin/sh
[ "\$1" = $ip_b ] || { echo "rsh agent: unknown host \$1" >&2; exit 1; }
shift
exec ip netns exec $B sh -c "\$*"
EOF
chmod +x "$tmp/rsh"

counters() {
  ip netns exec "$A" cat /sys/class/net/mh-a/statistics/tx_bytes \
    /sys/class/net/mh-a/statistics/rx_bytes | tr '\n' ' '
}

# across NAME REGEX PROGRAM ARGS...: PROGRAM as 2 ranks, rank 0 in a and rank 1 in b; it must
# exit 0, print a match of REGEX (grep -E) and move min_bytes each way over the veth.
across() {
  name=$1 regex=$2
  shift 2
  before=$(counters)
  start=$(date +%s)
  timeout --foreground -k 10 "$limit" ip netns exec "$A" "$mpirun" --allow-run-as-root -n 2 \
    --host "$ip_a:1,$ip_b:1" --mca plm_rsh_agent "$tmp/rsh" --mca oob_tcp_if_include "$net" \
    --mca btl self,tcp --mca btl_tcp_if_include "$net" "$@" >"$tmp/out" 2>&1 &
  child=$!
  wait "$child"
  status=$?
  child=
  cat "$tmp/out"
  [ "$status" -ne 124 ] || fail "$name: timed out after $limit s"
  [ "$status" -eq 0 ] || fail "$name: exit status $status"
  grep -Eq "$regex" "$tmp/out" || fail "$name: output does not match /$regex/"
  set -- $before $(counters)
  tx=$(($3 - $1)) rx=$(($4 - $2))
  say "$name: $(($(date +%s) - start)) s, mh-a sent $tx bytes, received $rx bytes"
  [ "$tx" -ge "$min_bytes" ] && [ "$rx" -ge "$min_bytes" ] ||
    fail "$name: under $min_bytes bytes each way over the veth"
}

across "ring parity" '\[  PASSED  \]' "$ring"
across "verify" '([0-9]+) cases: \1 passed, 0 failed' "$cli" verify --backend mpi --cp 2
across "train --check" 'check passed' "$cli" train --backend mpi --check --steps 5 --layers 2 \
  --d-model 16 --heads 2 --kv-heads 1 --seq 48 --batch 2 --warmup 2 --timeout 60
say "passed"
