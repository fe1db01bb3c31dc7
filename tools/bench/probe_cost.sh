#!/usr/bin/env bash
# Cost per packet of the inter-arrival probe, from the kernel's own accounting
# (kernel.bpf_stats_enabled: run_time_ns / run_cnt of each BPF program), under a UDP flood on a
# veth pair between two network namespaces. In the same run, on the same interface, a bpftrace
# one-liner computes the same inter-arrival histogram; its program is measured the same way.
# Our probe runs twice at once: tc ingress and XDP on the receiving veth.
#
#   sudo tools/bench/probe_cost.sh            # BUILD=build DURATION=3 RATE=300000 by default
#   BUILD=build-ebpf RATE=500000 tools/bench/probe_cost.sh
#
# Needs root, bpftool, bpftrace; uses build/tools/dripgate-burst for the flood when it exists,
# else a python3 sender. Restores kernel.bpf_stats_enabled and removes everything it created.
set -euo pipefail

BUILD=${BUILD:-build}
DURATION=${DURATION:-3}
RATE=${RATE:-300000}
PORT=9000
cd "$(dirname "$0")/../.."

die() { echo "probe_cost: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (BPF, tc, network namespaces)"
PROBE=$BUILD/ebpf/iat_probe_bench
[ -x "$PROBE" ] || die "$PROBE missing: meson compile -C $BUILD ebpf/iat_probe_bench"
command -v bpftool >/dev/null || die "bpftool missing"
command -v bpftrace >/dev/null || die "bpftrace missing"
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
MOUNTED_TRACEFS=0
if ! mountpoint -q /sys/kernel/tracing; then  # bpftrace resolves tracepoints through tracefs
  mount -t tracefs tracefs /sys/kernel/tracing && MOUNTED_TRACEFS=1
fi

ID=$$
NSA=dgbench-$ID-a
NSB=dgbench-$ID-b
VA=dgba$ID
VB=dgbb$ID
NET=10.78.$((ID % 250))
TMP=$(mktemp -d)
OLD_STATS=$(sysctl -n kernel.bpf_stats_enabled)
PIDS=()

cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  ip netns del "$NSA" 2>/dev/null || true
  ip netns del "$NSB" 2>/dev/null || true
  sysctl -qw kernel.bpf_stats_enabled="$OLD_STATS" || true
  [ "$MOUNTED_TRACEFS" = 1 ] && umount /sys/kernel/tracing 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Leftovers of runs that died (their pid is gone).
for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^dgbench-' || true); do
  owner=${n#dgbench-}; owner=${owner%%-*}
  kill -0 "$owner" 2>/dev/null || ip netns del "$n" 2>/dev/null || true
done

ip netns add "$NSA"
ip netns add "$NSB"
ip -n "$NSA" link add "$VA" type veth peer name "$VB" netns "$NSB"
ip -n "$NSA" addr add "$NET.1/24" dev "$VA"
ip -n "$NSB" addr add "$NET.2/24" dev "$VB"
ip -n "$NSA" link set "$VA" up
ip -n "$NSB" link set "$VB" up
ip -n "$NSA" link set lo up
ip -n "$NSB" link set lo up
ip netns exec "$NSA" ping -c 1 -W 2 "$NET.2" >/dev/null
IFX=$(ip -n "$NSB" -o link show "$VB" | cut -d: -f1)

sysctl -qw kernel.bpf_stats_enabled=1

# prog_stats ID -> "run_time_ns run_cnt"
prog_stats() {
  bpftool prog show id "$1" -j | python3 -c \
    'import json,sys; p=json.load(sys.stdin); print(p.get("run_time_ns",0), p.get("run_cnt",0))'
}
prog_ids() { bpftool prog show -j | python3 -c 'import json,sys; print(*[p["id"] for p in json.load(sys.stdin)])'; }
wait_line() {  # FILE PATTERN
  for _ in $(seq 100); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  cat "$1" >&2; die "timed out waiting for '$2' in $1"
}

# Baseline: an empty tc program on the same hook (after ours) shows what the kernel's accounting
# itself adds to run_time_ns per run on this machine; the probe's own cost is the difference.
cat >"$TMP/noop.bpf.c" <<'C'
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
SEC("tc") int noop_tc(struct __sk_buff* skb) { return TC_ACT_UNSPEC; }
char LICENSE[] SEC("license") = "Dual BSD/GPL";
C
clang -target bpf -O2 -idirafter "/usr/include/$(gcc -print-multiarch)" -c "$TMP/noop.bpf.c" \
  -o "$TMP/noop.bpf.o"
ip netns exec "$NSB" tc qdisc add dev "$VB" clsact
ip netns exec "$NSB" tc filter add dev "$VB" ingress pref 100 bpf da obj "$TMP/noop.bpf.o" sec tc
NOOP_ID=$(ip netns exec "$NSB" tc filter show dev "$VB" ingress | sed -n 's/.* id \([0-9]*\) .*/\1/p')
[ -n "$NOOP_ID" ] || die "cannot find the baseline program"

HOLD=3600  # until the script stops them (SIGTERM), after reading the figures
"$PROBE" --iface "$VB" --netns "$NSB" --seconds "$HOLD" >"$TMP/tc.out" 2>&1 &
PIDS+=($!)
"$PROBE" --iface "$VB" --netns "$NSB" --xdp --seconds "$HOLD" >"$TMP/xdp.out" 2>&1 &
PIDS+=($!)
wait_line "$TMP/tc.out" prog_id
wait_line "$TMP/xdp.out" prog_id
TC_ID=$(awk '/prog_id/{print $2}' "$TMP/tc.out")
XDP_ID=$(awk '/prog_id/{print $2}' "$TMP/xdp.out")

# The same histogram in bpftrace: global last arrival, gap histogram (log2: bpftrace has no
# log-linear hist), filtered on the receiving device. netif_receive_skb fires on the same
# packets just before tc ingress.
BEFORE=" $(prog_ids) "
bpftrace -e "tracepoint:net:netif_receive_skb
  /((struct sk_buff *)args->skbaddr)->dev->ifindex == $IFX/
  { \$t = nsecs; if (@last) { @iat = hist(\$t - @last); } @last = \$t; }" >"$TMP/bt.out" 2>&1 &
BT_PID=$!
PIDS+=($BT_PID)
wait_line "$TMP/bt.out" "Attaching"
BT_ID=""
for _ in $(seq 50); do
  for id in $(prog_ids); do
    case "$BEFORE" in *" $id "*) ;; *) BT_ID=$id ;; esac
  done
  [ -n "$BT_ID" ] && break
  sleep 0.1
done
[ -n "$BT_ID" ] || die "cannot find the bpftrace program"
sleep 0.5

BURST=$BUILD/tools/dripgate-burst
if [ -x "$BURST" ]; then
  SENDER="dripgate-burst --rate $RATE --duration ${DURATION}s"
  "$BURST" --netns "$NSA" --target "$NET.2:$PORT" --proto udp --size 64 \
    --rate "$RATE" --duration "${DURATION}s" --quiet
else
  SENDER="python3 UDP loop (no $BURST)"
  ip netns exec "$NSA" python3 - "$NET.2" "$PORT" "$DURATION" <<'PY'
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
dst = (sys.argv[1], int(sys.argv[2])); end = time.monotonic() + float(sys.argv[3]); b = bytes(64)
while time.monotonic() < end:
    for _ in range(1000):
        s.sendto(b, dst)
PY
fi
sleep 0.3

read -r TC_NS TC_CNT <<<"$(prog_stats "$TC_ID")"
read -r XDP_NS XDP_CNT <<<"$(prog_stats "$XDP_ID")"
read -r BT_NS BT_CNT <<<"$(prog_stats "$BT_ID")"
read -r NOOP_NS NOOP_CNT <<<"$(prog_stats "$NOOP_ID")"
kill -INT "$BT_PID" 2>/dev/null || true
wait "$BT_PID" 2>/dev/null || true
for p in "${PIDS[@]:0:2}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
PIDS=()

per() { python3 -c "import sys; n,c=int(sys.argv[1]),int(sys.argv[2]); print(f'{n/c:.1f}' if c else 'n/a')" "$1" "$2"; }
net() {  # ns/pkt minus the empty program's
  python3 -c "import sys; n,c,b,d=map(int,sys.argv[1:]); print(f'{n/c-b/d:.1f}' if c and d else 'n/a')" "$1" "$2" "$NOOP_NS" "$NOOP_CNT"
}
echo "probe cost per packet, $SENDER on veth $VB (kernel $(uname -r), $(nproc) CPUs)"
printf '  %-40s %10s %13s %8s %12s\n' program run_cnt run_time_ns ns/pkt "minus empty"
row() { printf '  %-40s %10s %13s %8s %12s\n' "$1" "$3" "$2" "$(per "$2" "$3")" "$(net "$2" "$3")"; }
row "dripgate iat_tc (tc ingress)" "$TC_NS" "$TC_CNT"
row "dripgate iat_xdp (XDP on veth)" "$XDP_NS" "$XDP_CNT"
row "bpftrace netif_receive_skb one-liner" "$BT_NS" "$BT_CNT"
row "empty tc program (accounting floor)" "$NOOP_NS" "$NOOP_CNT"
sysctl -qw kernel.bpf_stats_enabled="$OLD_STATS"
echo "  without traffic (BPF_PROG_TEST_RUN, one frame 2M times, bpf_stats_enabled=$OLD_STATS; includes"
echo "  the test loop's own ~35 ns):"
"$PROBE" --test-run 2000000 | sed 's/^/    /'
echo "  probe counts:"
sed 's/^/    tc:  /' "$TMP/tc.out" | grep -v prog_id || true
sed 's/^/    xdp: /' "$TMP/xdp.out" | grep -v prog_id || true
