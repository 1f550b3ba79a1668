#!/usr/bin/env bash
# hosts.sh: N "hosts" on this one machine, for multi-host runs and tests (docs/failures.md).
#
#   bash scripts/hosts.sh up N [DIR]    N network namespaces joined by a switch, and in DIR
#                                       (default /tmp/meshtrain-hosts) a hostfile, an rsh
#                                       agent and an mpirun wrapper
#   bash scripts/hosts.sh down [DIR]    removes the namespaces (and DIR's files)
#   bash scripts/hosts.sh exec K CMD... runs CMD on host K (1..N)
#   bash scripts/hosts.sh cut K | heal K   takes host K's link down, or up again
#   bash scripts/hosts.sh throttle K RATE  host K's sends at RATE (tc: 4mbit), `throttle K off`
#
# Host K is the namespace PREFIX-K with 192.0.2.K/24 on its eth0 (192.0.2.0/24 is TEST-NET-1,
# RFC 5737: never routed anywhere), cabled by a veth pair to a bridge in a namespace of its
# own, PREFIX-sw (no address on this machine's own network is touched: some sandboxes block
# connections through the machine's own namespace).  PREFIX is MT_HOSTS_PREFIX, default mth.
# Then
#
#   DIR/mpirun -np 2 build/meshtrain train ... --dp 2
#
# runs mpirun inside host 1 with --hostfile DIR/hostfile (slots per host: MT_HOSTS_SLOTS,
# default 1), the agent starting the remote daemons inside their namespaces (ip netns exec),
# and Open MPI's TCP transport only (shared memory does not cross hosts).  Needs root and
# iproute2; where a namespace cannot be made the script says so and exits 77 (what a test
# then reports as skipped).  Files are shared (one file system), as on a cluster with NFS.
set -euo pipefail
P=${MT_HOSTS_PREFIX:-mth}
cmd=${1:-}
shift || true

need() {
  command -v ip > /dev/null || { echo "hosts.sh: needs iproute2 (ip); apt-get install iproute2" >&2; exit 77; }
  [ "$(id -u)" -eq 0 ] || { echo "hosts.sh: needs root to make network namespaces" >&2; exit 77; }
}

down() {
  local n
  for n in $(ip netns list 2> /dev/null | awk '{print $1}' | grep -E "^$P-([0-9]+|sw)$" || true); do
    ip netns pids "$n" 2> /dev/null | xargs -r kill -9 2> /dev/null || true
    ip netns del "$n" 2> /dev/null || true
  done
}

case $cmd in
  up)
    need
    N=${1:?hosts.sh up N [DIR]}
    D=${2:-/tmp/meshtrain-hosts}
    [ "$N" -ge 1 ] && [ "$N" -le 250 ] || { echo "hosts.sh: N must be 1 to 250" >&2; exit 2; }
    down
    mkdir -p "$D"
    ip netns add "$P-sw" 2> /dev/null || { echo "hosts.sh: cannot make a network namespace here (ip netns add)" >&2; exit 77; }
    ip -n "$P-sw" link add br0 type bridge
    ip -n "$P-sw" link set br0 up
    : > "$D/hostfile"
    for k in $(seq 1 "$N"); do
      ip netns add "$P-$k"
      ip -n "$P-$k" link set lo up
      ip -n "$P-$k" link add eth0 type veth peer name "p$k" netns "$P-sw"
      ip -n "$P-sw" link set "p$k" master br0
      ip -n "$P-sw" link set "p$k" up
      ip -n "$P-$k" addr add "192.0.2.$k/24" dev eth0
      ip -n "$P-$k" link set eth0 up
      # a peer that stops answering is given up on in seconds, not Linux's 15 minutes of
      # retransmissions: mpirun and its daemons then see a lost host and end the job
      ip netns exec "$P-$k" sysctl -q -w net.ipv4.tcp_retries2=${MT_HOSTS_TCP_RETRIES:-5}
      echo "192.0.2.$k slots=${MT_HOSTS_SLOTS:-1}" >> "$D/hostfile"
    done
    cat > "$D/agent" << EOF
#!/usr/bin/env bash
# rsh agent for mpirun (hosts.sh): agent HOST COMMAND... runs COMMAND inside HOST's namespace
host=\$1; shift
k=\${host#192.0.2.}
ip netns list | grep -q "^$P-\$k\\b" || { echo "agent: no host \$host" >&2; exit 1; }
exec ip netns exec "$P-\$k" sh -c "\$*"
EOF
    cat > "$D/mpirun" << EOF
#!/usr/bin/env bash
# mpirun across the hosts of hosts.sh, started inside host 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
hf=(--hostfile "$D/hostfile")
for a in "\$@"; do [ "\$a" = --hostfile ] && hf=(); done # a hostfile given (train --hostfile): that one
exec ip netns exec "$P-1" mpirun "\${hf[@]}" --mca plm_rsh_agent "$D/agent" \\
  --mca oob_tcp_if_include 192.0.2.0/24 --mca btl_tcp_if_include 192.0.2.0/24 --mca btl tcp,self \\
  --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3 "\$@"
EOF
    cat > "$D/probe" << EOF
#!/usr/bin/env bash
# probe HOST CMD... (train's MT_HOST_PROBE): runs CMD on HOST if its link is up, as ssh would reach it
k=\${1#192.0.2.}; shift
ip -n "$P-sw" link show "p\$k" 2> /dev/null | grep -q "state UP" || { echo "probe: 192.0.2.\$k does not answer" >&2; exit 255; }
exec ip netns exec "$P-\$k" "\$@"
EOF
    chmod +x "$D/agent" "$D/mpirun" "$D/probe"
    echo "hosts.sh: $N hosts up (192.0.2.1-$N, namespaces $P-1..$P-$N); run: $D/mpirun -np $N COMMAND"
    ;;
  down)
    down
    D=${1:-/tmp/meshtrain-hosts}
    rm -f "$D/hostfile" "$D/agent" "$D/mpirun" "$D/probe"
    ;;
  exec)
    k=${1:?hosts.sh exec K CMD...}; shift
    exec ip netns exec "$P-$k" "$@"
    ;;
  cut | heal)
    k=${1:?hosts.sh $cmd K}
    ip -n "$P-sw" link set "p$k" "$([ "$cmd" = cut ] && echo down || echo up)"
    ;;
  throttle)
    k=${1:?hosts.sh throttle K RATE|off}
    rate=${2:?hosts.sh throttle K RATE|off}
    ip netns exec "$P-$k" tc qdisc del dev eth0 root 2> /dev/null || true
    [ "$rate" = off ] || ip netns exec "$P-$k" tc qdisc add dev eth0 root tbf rate "$rate" burst 32kbit latency 400ms
    ;;
  *)
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] || exit 2
    ;;
esac
