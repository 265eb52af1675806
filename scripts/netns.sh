#!/usr/bin/env bash
# Hosts for multi-node tests on one machine: Linux network namespaces joined by a bridge.
#   netns.sh up N [PREFIX]      hosts PREFIX-h0..h{N-1} at 10.77.0.1..N/24 (PREFIX default "ddp"), each with its
#                               own loopback and an eth0 on a bridge inside the namespace PREFIX-sw
#   netns.sh down [PREFIX]      removes them
#   netns.sh addr I             the address of host I (10.77.0.<I+1>)
#   netns.sh exec I CMD...      runs CMD on host I (ip netns exec PREFIX-hI)
#   netns.sh agent HOST CMD...  OpenMPI's launch agent (plm_rsh_agent): HOST is a host's address, CMD the
#                               orted command line, run in that host's namespace
# Faults: `ip -n ddp-h1 link set eth0 down` cuts host 1's link; `tc -n ddp-h1 qdisc add dev eth0 root netem
# delay 50ms loss 5%` slows it. Needs root (CAP_NET_ADMIN) and iproute2. Several test bed instances can exist
# at once under different prefixes (the subnet is then shared, so give each its own PREFIX and SUBNET).
set -euo pipefail
SUBNET=${DDP_NETNS_SUBNET:-10.77.0}
cmd=${1:-}
shift || true
case $cmd in
  up)
    n=${1:?usage: netns.sh up N [PREFIX]} p=${2:-ddp}
    "$0" down "$p" 2>/dev/null || true
    ip netns add "$p-sw"
    ip -n "$p-sw" link add br0 type bridge
    ip -n "$p-sw" link set br0 up
    for ((i = 0; i < n; i++)); do
      h="$p-h$i"
      ip netns add "$h"
      ip -n "$h" link set lo up
      ip link add "$p-v$i" type veth peer name "$p-s$i"
      ip link set "$p-v$i" netns "$h" name eth0
      ip link set "$p-s$i" netns "$p-sw"
      ip -n "$p-sw" link set "$p-s$i" master br0 up
      ip -n "$h" addr add "$SUBNET.$((i + 1))/24" dev eth0
      ip -n "$h" link set eth0 up
    done
    ;;
  down)
    p=${1:-ddp}
    for ns in $(ip netns list | awk '{print $1}' | grep -E "^$p-(h[0-9]+|sw)\$" || true); do ip netns del "$ns"; done
    ;;
  addr) echo "$SUBNET.$(($1 + 1))" ;;
  exec)
    i=$1
    shift
    exec ip netns exec "${DDP_NETNS_PREFIX:-ddp}-h$i" "$@"
    ;;
  agent)
    # OpenMPI calls: AGENT [options] HOST CMD... (rsh/ssh style); options such as -x are skipped.
    while [[ ${1:-} == -* ]]; do shift; done
    host=$1
    shift
    i=$(( ${host##*.} - 1 ))
    exec ip netns exec "${DDP_NETNS_PREFIX:-ddp}-h$i" /bin/sh -c "$*"
    ;;
  *)
    sed -n '2,13p' "$0" >&2
    exit 2
    ;;
esac
