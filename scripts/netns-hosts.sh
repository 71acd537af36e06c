# Sourced by scripts/netns-run and scripts/bench-osu-netns: two "hosts" on this machine.
#
# netns_hosts_up TAG NET: network namespaces TAG"A" (NET.2) and TAG"B" (NET.3), each with its
# loopback and one veth, on a bridge TAG"br" whose root-namespace end is NET.1 (NET: the first
# three numbers of a /24, e.g. 10.216.30). netns_hosts_down TAG removes them (never fails).
# Needs root and iproute2.

netns_hosts_down() {
  ip netns del "${1}A" 2>/dev/null || true
  ip netns del "${1}B" 2>/dev/null || true
  ip link del "${1}br" 2>/dev/null || true
}

netns_hosts_up() {
  local tag=$1 net=$2 i=2 h ns
  ip link add "${tag}br" type bridge
  ip addr add "$net.1/24" dev "${tag}br"
  ip link set "${tag}br" up
  for h in A B; do
    ns=$tag$h
    ip netns add "$ns"
    ip link add "${tag}${h}h" type veth peer name "${tag}${h}n"
    ip link set "${tag}${h}h" master "${tag}br"
    ip link set "${tag}${h}h" up
    ip link set "${tag}${h}n" netns "$ns"
    ip -n "$ns" addr add "$net.$i/24" dev "${tag}${h}n"
    ip -n "$ns" link set "${tag}${h}n" up
    ip -n "$ns" link set lo up
    i=$((i + 1))
  done
}
