#!/usr/bin/env bash
# A cluster in a box: N emulated hosts on this machine, each a network namespace with its own hostname,
# address and link to one bridge, so that MPI ranks on different "hosts" talk over TCP through real
# network interfaces (which tc can shape).  What dybw's `hosts` tests run on (docs/cluster.md).
#
#   tests/cluster/hosts.sh up [N]          hosts h1..hN (default 3): namespace dybw-hK, address 10.213.0.K,
#                                          a veth to the bridge dybw0 (10.213.0.254), /etc/hosts naming all
#   tests/cluster/hosts.sh down            remove what `up` made (namespaces, veths, bridge, host files)
#   tests/cluster/hosts.sh status          each host's link and the bytes it carried each way
#   tests/cluster/hosts.sh shape H RATE    limit host H's link to RATE both ways (tc tbf, e.g. 20mbit);
#                                          RATE=none lifts the limit
#   tests/cluster/hosts.sh launcher        the runner.launcher list that runs a job's ranks on the hosts
#
# Needs root and iproute2.  Only addresses inside 10.213.0.0/24, on interfaces this script creates, are
# used; `down` deletes every one of them explicitly.
set -euo pipefail

BRIDGE=dybw0
SUBNET=10.213.0
PREFIX=dybw-                      # namespace of host hK: dybw-hK
HERE=$(cd "$(dirname "$0")" && pwd)
LAUNCH="$HERE/netns-launch"       # what mpiexec runs instead of ssh

die() { echo "hosts.sh: $*" >&2; exit 1; }
log() { echo "hosts.sh: $*"; }

hosts() { ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX" | sed "s/^$PREFIX//" | sort -V || true; }

up() {
    local count=${1:-3} k host
    [[ $(id -u) == 0 ]] || die "needs root (it creates network namespaces and interfaces)"
    command -v ip >/dev/null || die "needs iproute2's ip"
    ((count >= 1 && count <= 200)) || die "N=$count: allowed 1..200"
    [[ -z $(hosts) ]] || die "hosts are up already ($(hosts | tr '\n' ' ')): run '$0 down' first"
    ip link add "$BRIDGE" type bridge
    ip addr add "$SUBNET.254/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for ((k = 1; k <= count; k++)); do
        host=h$k
        ip netns add "$PREFIX$host"
        ip link add "veth-$host" type veth peer name eth0 netns "$PREFIX$host"
        ip link set "veth-$host" master "$BRIDGE" up
        ip -n "$PREFIX$host" addr add "$SUBNET.$k/24" dev eth0
        ip -n "$PREFIX$host" link set eth0 up
        ip -n "$PREFIX$host" link set lo up
        mkdir -p "/etc/netns/$PREFIX$host"
        {
            echo "127.0.0.1 localhost"
            for ((j = 1; j <= count; j++)); do echo "$SUBNET.$j h$j"; done
            echo "$SUBNET.254 $(hostname -s)"
        } >"/etc/netns/$PREFIX$host/hosts"
    done
    for ((k = 1; k <= count; k++)); do
        ip -n "${PREFIX}h$k" -o link show eth0 | grep -q "state UP" || die "h$k's link did not come up"
    done
    log "up: $count hosts h1..h$count on $BRIDGE ($SUBNET.0/24); runner.launcher: $(launcher)"
}

down() {
    local host
    for host in $(hosts); do
        ip link del "veth-$host" 2>/dev/null || true
        ip netns del "$PREFIX$host"
        rm -rf "/etc/netns/$PREFIX$host"
        log "removed $host"
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; log "removed $BRIDGE"; fi
}

status() {
    local host
    for host in $(hosts); do
        # Bytes the veth received from the host (its traffic out) and sent to it (its traffic in).
        echo "$host: out $(cat "/sys/class/net/veth-$host/statistics/rx_bytes") B," \
            "in $(cat "/sys/class/net/veth-$host/statistics/tx_bytes") B," \
            "limit $(tc qdisc show dev "veth-$host" | grep -o 'rate [^ ]*' || echo none)"
    done
}

shape() {
    local host=$1 rate=$2
    ip netns list | grep -q "^$PREFIX$host\b" || die "no host $host (hosts: $(hosts | tr '\n' ' '))"
    tc qdisc del dev "veth-$host" root 2>/dev/null || true
    ip netns exec "$PREFIX$host" tc qdisc del dev eth0 root 2>/dev/null || true
    [[ $rate == none ]] && { log "$host: no limit"; return; }
    # tbf (netem is not in every kernel): a queue deep enough that nothing is dropped, so a message takes
    # what the rate allows and TCP never has to retransmit.
    tc qdisc add dev "veth-$host" root tbf rate "$rate" burst 32kb limit 64mb
    ip netns exec "$PREFIX$host" tc qdisc add dev eth0 root tbf rate "$rate" burst 32kb limit 64mb
    log "$host: $rate each way"
}

launcher() {
    # mpiexec (MPICH's Hydra) starts one proxy per host through netns-launch instead of ssh and places
    # ranks round-robin; UCX_TLS=tcp,self keeps MPI from taking shared memory between the namespaces.
    local list
    list=$(hosts | paste -sd, -)
    [[ -n $list ]] || die "no hosts are up: run '$0 up' first"
    echo "[mpiexec,-n,'{ranks}',-hosts,'$list',-launcher,ssh,-launcher-exec,$LAUNCH,-iface,$BRIDGE,-genv,UCX_TLS,'tcp,self']"
}

case "${1:-}" in
    up) up "${2:-3}" ;;
    down) down ;;
    status) status ;;
    shape) [[ $# == 3 ]] || die "usage: $0 shape HOST RATE"; shape "$2" "$3" ;;
    launcher) launcher ;;
    *) echo "usage: $0 up [N] | down | status | shape HOST RATE | launcher" >&2; exit 2 ;;
esac
