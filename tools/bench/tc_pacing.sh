#!/usr/bin/env bash
# Pacing precision measured at the RECEIVER: Linux tc side by side with dripgate-dataplane in one
# run, in alternating rounds. A steady UDP flood (dripgate-burst, asked for more than the shaping
# rate, so the shaper always has a backlog) goes through each shaper to a receiver namespace that
# captures it with kernel nanosecond timestamps; `dripgate-iat pcap --interval 1/rate` then
# gives, exactly, the share of inter-arrival gaps within ±64/128/256/512/1000 ns of the ideal
# interval, the p99 of |gap - 1/rate| and the achieved rate. tc has no schedule to compare a
# departure with, so the gap at the receiver is the one measure both share (the dataplane's own
# TSC departure error is printed beside it, not instead of it).
#
#   tools/bench/tc_pacing.sh [--build DIR] [--seconds N] [--warmup N] [--rounds N]
#                            [--rates "100000 500000"] [--shapers "tbf tbf8 htb fq dripgate"]
#                            [--flood X] [--json FILE]
#
#   tx netns [ta] --veth--> [ra] rx netns                       tc: the qdisc is ta's root
#   tx netns [tb] --veth--> [da] dp netns [db] --veth--> [rb] rx netns
#                                dripgate-dataplane: net_af_packet on da and db
#
# The receiver is the far end in both paths: the capture runs in the rx namespace on ra (behind
# ta and its qdisc) or rb (behind the dataplane's db), never on the shaper's own device.
#
# Rounds: for each rate, every round runs each shaper once, and the order rotates by one shaper
# a round (round 1: tbf tbf8 htb dripgate, round 2: tbf8 htb dripgate tbf, ...), so none always
# runs first, right after the previous rate's set-up, or always last. A shared machine's load
# moves between runs; the medians of the rounds, each round printed beside them, show how much.
# The best tc shaper at a rate is the one with the highest median share within ±1 us (ties: the
# lower median p99 |dev|); the headline sets dripgate's medians against that shaper's.
#
# Shapers (rate = frame bits x pps for the fixed 60-byte frame):
#   tbf       burst = one frame, the smallest that passes a frame: tokens for one packet at most,
#             so every departure waits for its own timer;
#   tbfN      burst = N frames: what a user raises the burst to when tbf misses the rate; lets
#             up to N frames out back to back after a late timer;
#   htb       one class, rate = ceil, burst = cburst = quantum = one frame;
#   fq        maxrate, quantum = initial_quantum = one frame (the default 2 MTU lets ~50 small
#             frames out back to back), timer_slack 0: the pacing qdisc (what SO_MAX_PACING_RATE
#             drives); left out, and said so, when the kernel lacks it;
#   dripgate  dripgate-dataplane: port rate_pps = pps, batch 1, max_catchup 8, lcores 0-1 (one
#             worker on CPU 1 does RX and drip), qdisc_bypass on transmit.
# The flood and the capture run on CPU 0 for every shaper; CPU 1 is the dataplane's worker when
# it runs, and otherwise free. The receiver has no address (no ICMP back), the sender a static
# neighbour (no ARP in the stream), IPv6 is off. Stamps: the kernel's software stamp for the
# receiving packet socket, taken as the frame enters the far veth's receive path
# (netdev_tstamp_prequeue, the default), read with tcpdump --time-stamp-precision=nano.
# A packet lost between the shaper and the capture makes a double gap in place of two: the
# capture's own drops (tcpdump's kernel counter) and the receive path's (the far veth's rx and
# its peer's tx drop counters over the capture) are counted, and rows that lost any are marked.
# Before the runs, a 10 us sleep on CPU 0 is timed: how late this machine's timers fire bounds
# every timer-driven shaper (tc), as scheduler_bench --stalls bounds the dataplane in
# dp_pacing.sh.
#
# Needs root, tc, tcpdump, and in --build: tools/dripgate-iat, tools/dripgate-burst,
# dataplane/dripgate-dataplane. Removes every namespace, qdisc (with its namespace) and process
# it created, also on error and Ctrl-C.
set -euo pipefail

source "$(dirname "$0")/../lib.sh"
bench_defaults
warmup=2
rates="100000 500000"
shapers="tbf tbf8 htb fq dripgate"
flood=1.5
json_out=""
usage="usage: $0 [--build DIR] [--seconds N] [--warmup N] [--rounds N] [--rates \"R...\"] [--shapers \"tbf tbf8 htb fq dripgate\"] [--flood X] [--json FILE]"
while [[ $# -gt 0 ]]; do
  [[ $1 != --baseline ]] && bench_flag "$1" "${2-}" && { shift 2; continue; }
  case "$1" in
    --warmup) warmup=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --shapers) shapers=$2; shift 2 ;;
    --flood) flood=$2; shift 2 ;;
    --json) json_out=$2; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
die() { echo "tc_pacing: $*" >&2; exit 1; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds takes a positive whole number"
[[ "$(id -u)" == 0 ]] || die "needs root (network namespaces, tc, packet capture)"
command -v tc >/dev/null || die "tc missing (iproute2)"
command -v tcpdump >/dev/null || die "tcpdump missing"
iat="$build/tools/dripgate-iat"
burst="$build/tools/dripgate-burst"
dp="$build/dataplane/dripgate-dataplane"
for b in "$iat" "$burst"; do [[ -x "$b" ]] || die "build $b first"; done
for s in $shapers; do
  case "$s" in
    tbf | tbf[0-9]* | htb | fq) ;;
    dripgate) [[ -x "$dp" ]] || die "build $dp first" ;;
    *) die "unknown shaper '$s' (tbf, tbfN, htb, fq, dripgate)" ;;
  esac
done

payload=18  # 14 + 20 + 8 + 18: a 60-byte frame, the smallest Ethernet frame
frame=$((14 + 20 + 8 + payload))
port=9
id=$$
ns_tx=dgtc-$id-tx
ns_dp=dgtc-$id-dp
ns_rx=dgtc-$id-rx
net_a=10.91.$((id % 250))
net_b=10.92.$((id % 250))
tmp=$(mktemp -d /tmp/tc_pacing.XXXXXX)
cap_dir=$(mktemp -d /dev/shm/tc_pacing.XXXXXX)  # up to 300 MB per 10 s capture: not on disk
# Pids of the running helpers; each is cleared once reaped, so cleanup never kills a reused pid.
flood_pid="" dp_pid="" cap_pid="" sampler_pid=""

stop() {  # stop VAR...: SIGTERM the processes named by the variables, reap, clear
  local v
  for v in "$@"; do [[ -z "${!v}" ]] || kill "${!v}" 2>/dev/null || true; done
  for v in "$@"; do
    [[ -z "${!v}" ]] || wait "${!v}" 2>/dev/null || true
    printf -v "$v" '%s' ""
  done
}
cleanup() {
  stop cap_pid sampler_pid flood_pid dp_pid
  # Deleting a namespace takes its veths and their qdiscs with it.
  ip netns del "$ns_tx" 2>/dev/null || true
  ip netns del "$ns_dp" 2>/dev/null || true
  ip netns del "$ns_rx" 2>/dev/null || true
  rm -rf "$tmp" "$cap_dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Every helper this script starts (capture, samplers, tc) inherits CPU 0: CPU 1 stays the
# dataplane worker's alone (EAL pins its lcores itself) and otherwise free.
taskset -p -c 0 $$ >/dev/null

# Leftovers of runs that died without cleaning up (their pid is gone).
for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^dgtc-' || true); do
  owner=${n#dgtc-}; owner=${owner%%-*}
  kill -0 "$owner" 2>/dev/null || ip netns del "$n" 2>/dev/null || true
done

for n in "$ns_tx" "$ns_dp" "$ns_rx"; do
  ip netns add "$n"
  ip netns exec "$n" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
      net.ipv6.conf.default.disable_ipv6=1
  ip -n "$n" link set lo up
done
ip -n "$ns_tx" link add ta type veth peer name ra netns "$ns_rx"
ip -n "$ns_tx" link add tb type veth peer name da netns "$ns_dp"
ip -n "$ns_dp" link add db type veth peer name rb netns "$ns_rx"
# Frames leave as they were built: no checksum or segmentation offload left for a later hop.
for e in "$ns_tx ta" "$ns_tx tb" "$ns_dp da" "$ns_dp db" "$ns_rx ra" "$ns_rx rb"; do
  read -r n i <<<"$e"
  ip netns exec "$n" ethtool -K "$i" tx off tso off gso off gro off >/dev/null 2>&1 || true
  ip -n "$n" link set "$i" up
done
ip -n "$ns_tx" addr add "$net_a.1/24" dev ta
ip -n "$ns_tx" addr add "$net_b.1/24" dev tb
mac() {
  ip -n "$1" -j link show dev "$2" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["address"])'
}
ip -n "$ns_tx" neigh replace "$net_a.2" lladdr "$(mac "$ns_rx" ra)" dev ta nud permanent
ip -n "$ns_tx" neigh replace "$net_b.2" lladdr "$(mac "$ns_rx" rb)" dev tb nud permanent

# qdisc_setup SHAPER BITS_PER_S: the tc shaper as ta's root qdisc (tools/lib.sh).
qdisc_setup() {
  tc_shaper_add "$ns_tx" ta "$1" "$2" "$frame"
}

# dataplane_start RATE SECONDS: dripgate-dataplane in the dp namespace, up once its control
# socket accepts.
dataplane_start() {
  cat >"$tmp/dp.yaml" <<EOF
dataplane:
  eal: ["-l", "0-1", "--no-huge", "--no-shconf", "-m", "512", "--no-pci",
        "--file-prefix=dgtc$id",
        "--vdev=net_af_packet0,iface=da,qpairs=1,qdisc_bypass=1",
        "--vdev=net_af_packet1,iface=db,qpairs=1,qdisc_bypass=1"]
  ports: { client: 0, cluster: 1 }
  lcores: { rx: 1, drip: 1 }
  mbufs: 16383
  drip: { rate_pps: $1, rate_bps: 0, batch: 1, max_catchup: 8 }
  classes:
    default: { weight: 1, rate_pps: 0, queue_depth: 4096, ttl_ms: 1000 }
  unknown_flows: default
  control_socket: $tmp/dp.sock
EOF
  rm -f "$tmp/dp.sock" "$tmp/dp.json"
  ip netns exec "$ns_dp" "$dp" --config "$tmp/dp.yaml" --shape-non-ip default --duration "$2" \
      --drain-ms 0 --stats-file "$tmp/dp.json" >"$tmp/dp.out" 2>"$tmp/dp.err" &
  dp_pid=$!
  local i
  for i in $(seq 1 200); do
    [[ -S "$tmp/dp.sock" ]] && return 0
    kill -0 "$dp_pid" 2>/dev/null || { cat "$tmp/dp.err" >&2; die "dripgate-dataplane exited"; }
    sleep 0.05
  done
  die "dripgate-dataplane did not open its control socket"
}

# flood_start NET RATE SECONDS: the UDP flood from the tx namespace toward NET.2, on CPU 0.
flood_start() {
  "$burst" --netns "$ns_tx" --target "$1.2:$port" --proto udp --size "$payload" \
      --rate "$(python3 -c "print(round($2 * $flood))")" --duration "${3}s" --quiet \
      --json "$tmp/flood.json" &
  # shellcheck disable=SC2034  # read by stop, through ${!v}
  flood_pid=$!
}

# sample_queue SHAPER SECONDS: the shaper's queue length (packets) every 0.2 s for SECONDS;
# prints the shortest seen. Above 0, the shaper had a backlog all along, as it must.
sample_queue() {
  python3 - "$@" "$ns_tx" "$tmp/dp.sock" <<'EOF'
import json, socket, subprocess, sys, time
shaper, secs, ns, sock = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
def qlen():
    if shaper == "dripgate":
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(sock)
            s.sendall(b'{"op": "stats"}\n')
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        return json.loads(buf)["stats"]["queue_len"]
    out = subprocess.run(["tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", "ta"],
                         capture_output=True, text=True, check=True).stdout
    return next(q["qlen"] for q in json.loads(out) if q.get("root"))
seen = []
end = time.monotonic() + secs
while time.monotonic() < end:
    seen.append(qlen())
    time.sleep(0.2)
print(min(seen) if seen else -1)
EOF
}

# How late a 10 us timer fires on CPU 0 (1 ns timer slack), in ns: p50 and p99 over 1 s.
timer_lateness() {
  python3 - <<'EOF'
import ctypes, time
ctypes.CDLL(None).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK: 1 ns, as the kernel's qdisc timers
late = []
end = time.monotonic_ns() + 1_000_000_000
while time.monotonic_ns() < end:
    due = time.monotonic_ns() + 10_000
    time.sleep(max(0, due - time.monotonic_ns()) / 1e9)
    late.append(time.monotonic_ns() - due)
late.sort()
print(late[len(late) // 2], late[int(len(late) * 0.99)])
EOF
}

# Qdiscs this kernel lacks (a VM kernel may be built without fq) are left out, and said so.
skipped=()
run_shapers=()
for s in $shapers; do
  if [[ "$s" != dripgate ]]; then
    if ! qdisc_setup "$s" 1000000 2>/dev/null; then
      tc -n "$ns_tx" qdisc del dev ta root 2>/dev/null || true
      skipped+=("$s")
      continue
    fi
    tc -n "$ns_tx" qdisc del dev ta root
  fi
  run_shapers+=("$s")
done

# link_drops NS IFACE PEER_NS PEER: frames the receive path lost so far, IFACE's rx drops plus its
# veth peer's tx drops (a full backlog behind the veth counts on either side by kernel version).
link_drops() {
  { ip -n "$1" -s -j link show dev "$2"; ip -n "$3" -s -j link show dev "$4"; } |
    python3 -c 'import json, sys
a, b = (json.loads(l) for l in sys.stdin if l.strip())
print(a[0]["stats64"]["rx"]["dropped"] + b[0]["stats64"]["tx"]["dropped"])'
}

# measure RATE SHAPER ROUND: one run of SHAPER at RATE, its figures appended to results.jsonl.
measure() {
  local rate=$1 shaper=$2 round=$3 interval bits net=$net_a iface=ra peer_ns=$ns_tx peer=ta
  interval=$(python3 -c "print(f'{1e9 / $rate:.3f}ns')")
  bits=$((frame * 8 * rate))
  if [[ "$shaper" == dripgate ]]; then
    net=$net_b iface=rb peer_ns=$ns_dp peer=db
    dataplane_start "$rate" $((warmup + seconds + 5))
  else
    qdisc_setup "$shaper" "$bits"
  fi
  flood_start "$net" "$rate" $((warmup + seconds + 3))
  sleep "$warmup"
  sample_queue "$shaper" "$(python3 -c "print($seconds - 0.5)")" >"$tmp/queue" &
  sampler_pid=$!
  local path0 path1
  path0=$(link_drops "$ns_rx" "$iface" "$peer_ns" "$peer")
  # The far end: the rx namespace's end of the shaper's veth (ra behind ta, rb behind db).
  ip netns exec "$ns_rx" timeout -s INT "$seconds" tcpdump -i "$iface" -n -q \
      -s 64 -B 65536 --time-stamp-precision=nano -w "$cap_dir/cap.pcap" \
      "udp dst port $port" 2>"$tmp/tcpdump.err" &
  cap_pid=$!
  wait "$cap_pid" || true
  cap_pid=""
  path1=$(link_drops "$ns_rx" "$iface" "$peer_ns" "$peer")
  wait "$sampler_pid" || true
  sampler_pid=""
  local qdisc_json=null dp_json=null cap_drops
  [[ "$shaper" == dripgate ]] || qdisc_json=$(tc -n "$ns_tx" -s -j qdisc show dev ta)
  stop flood_pid dp_pid
  [[ "$shaper" == dripgate ]] || tc -n "$ns_tx" qdisc del dev ta root
  [[ -s "$cap_dir/cap.pcap" ]] || { cat "$tmp/tcpdump.err" >&2; die "$shaper: nothing captured"; }
  "$iat" pcap "$cap_dir/cap.pcap" --interval "$interval" --window 1ms --json "$tmp/iat.json" \
      --quiet
  rm -f "$cap_dir/cap.pcap"
  cap_drops=$(sed -n 's/^\([0-9]*\) packets* dropped by kernel.*/\1/p' "$tmp/tcpdump.err")
  [[ "$shaper" != dripgate || ! -s "$tmp/dp.json" ]] || dp_json=$(cat "$tmp/dp.json")
  python3 -c 'import json, sys
a = sys.argv
print(json.dumps({"shaper": a[1], "rate": float(a[2]), "round": int(a[3]),
                  "capture_drops": int(a[4] or -1), "path_drops": int(a[5]),
                  "min_queue": int(a[6] or -1), "iat": json.load(open(a[7])),
                  "flood": json.load(open(a[8])), "qdisc": json.loads(a[9]),
                  "dataplane": json.loads(a[10])}))' \
      "$shaper" "$rate" "$round" "$cap_drops" "$((path1 - path0))" "$(cat "$tmp/queue")" \
      "$tmp/iat.json" "$tmp/flood.json" "$qdisc_json" "$dp_json" >>"$tmp/results.jsonl"
}

timer=$(timer_lateness)
n=${#run_shapers[@]}
for rate in $rates; do
  for ((k = 0; k < rounds; k++)); do
    # Round k + 1 starts k shapers further along the list.
    for ((j = 0; j < n; j++)); do
      measure "$rate" "${run_shapers[$(((j + k) % n))]}" $((k + 1))
    done
  done
done

[[ -z "$json_out" ]] || cp "$tmp/results.jsonl" "$json_out"
python3 - "$tmp/results.jsonl" "$seconds" "$warmup" "$flood" "$frame" "$timer" "$(uptime)" \
    "${skipped[*]}" "$rounds" <<'EOF'
import json, statistics, sys
path, secs, warm, flood, frame, timer, up, skipped, nrounds = sys.argv[1:10]
rows = [json.loads(l) for l in open(path)]
t50, t99 = (int(x) for x in timer.split())
print(f"\nPacing at the receiver: {nrounds} rounds, shapers in rotating order; {secs} s captures after")
print(f"{warm} s of warm-up, {frame}-byte UDP frames, flood asked for {flood}x the rate; gap = inter-arrival")
print("at the far veth in the receiver namespace (kernel ns stamp), ideal = 1/rate. Timers on")
print(f"CPU 0: a 10 us sleep wakes {t50 / 1000:.1f} us late (p50), {t99 / 1000:.1f} us (p99).")
print(f"({up.strip()})\n")

def lost(r):
    """Frames lost between the shaper and the capture, None when tcpdump's count is unknown."""
    return None if r["capture_drops"] < 0 else r["capture_drops"] + r["path_drops"]

hdr = (f"{'shaper':<9} {'rate pps':>9} {'round':>5} {'packets':>9} {'±64ns':>8} {'±128ns':>8} "
       f"{'±256ns':>8} {'±512ns':>8} {'±1us':>8} {'p99 |dev|':>10} {'p99.9 |dev|':>11} "
       f"{'achieved pps':>12} {'off %':>8} {'offered pps':>11} {'min queue':>9} {'lost':>6} "
       f"{'dp tsc ±256':>11} {'stalls':>6}")
print(hdr)
print("-" * len(hdr))
prev = None
starved = lossy = False
for r in sorted(rows, key=lambda r: (r["rate"], r["round"])):
    if prev is not None and r["rate"] != prev:
        print()
    prev = r["rate"]
    p, f, fl = r["iat"], r["iat"]["interval"], r["flood"]
    offered = fl["sent"] / fl["elapsed_ns"] * 1e9 if fl["elapsed_ns"] else 0
    tsc, stalls = "-", "-"
    if r["dataplane"]:
        tsc = f"{r['dataplane']['departure_error']['within_256ns'] * 100:.3f}%"
        stalls = r["dataplane"]["stall_clamps"]
    # A sample with an empty queue: the flood did not keep the shaper busy.
    mark = "" if r["min_queue"] > 0 else "*"
    starved = starved or mark != ""
    n = lost(r)
    lossy = lossy or n != 0
    print(f"{r['shaper']:<9} {r['rate']:>9.0f} {r['round']:>5} {p['packets']:>9} "
          f"{f['within_64ns']*100:>7.3f}% {f['within_128ns']*100:>7.3f}% "
          f"{f['within_256ns']*100:>7.3f}% {f['within_512ns']*100:>7.3f}% "
          f"{f['within_1000ns']*100:>7.3f}% {f['p99_ns']:>10} {f['p999_ns']:>11} "
          f"{p['mean_rate_pps']:>12.1f} {f['rate_offset'] * 100:>+8.3f} {offered:>11.0f} "
          f"{str(r['min_queue']) + mark:>9} {'?' if n is None else str(n) + ('!' if n else ''):>6} "
          f"{tsc:>11} {stalls:>6}")
print("\n±N ns: share of gaps within N ns of 1/rate (exact, from the capture's ns stamps); |dev|:")
print("|gap - 1/rate| in ns; achieved: packets / (last - first) in the capture, off %: vs the")
print("configured rate. offered: what the flood got out per second. min queue: the shaper's")
print("shortest queue (packets) in samples every 0.2 s during the capture; above 0, the backlog it")
print("must always have.")
if starved:
    print("*: the queue ran empty, the flood did not keep that shaper busy all along. With tc the")
    print("   shaper itself can be the cause: the qdisc's timer fires on the sender's CPU, once per")
    print("   packet, and on a machine where timers are costly (see above) it takes the CPU the")
    print("   sender needs; with dripgate, CPU 0 also carries the kernel's receive path into the")
    print("   dataplane's af_packet ring.")
print("lost: frames lost between the shaper and the capture (tcpdump's kernel drops + the far")
print("veth's receive drops); each turns two gaps into one double gap, so a row's shares may read")
print("up to 2 x lost / gaps too low. !: lost some; ?: tcpdump's count unreadable.")
print("dp tsc ±256: the dataplane's own departure error (TSC before tx_burst - schedule) in the")
print("same run, not measured at the receiver; stalls: times its worker was held up past")
print("max_catchup intervals (preempted, interrupted), each a rate loss.")
if skipped:
    print(f"Not in this kernel, left out: {skipped} (CONFIG_NET_SCH_*).")

def med(rs, get):
    return statistics.median(get(r) for r in rs)

KEYS = [("±256ns", lambda r: r["iat"]["interval"]["within_256ns"] * 100, "{:.3f}%", "{:.2f}"),
        ("±1us", lambda r: r["iat"]["interval"]["within_1000ns"] * 100, "{:.3f}%", "{:.2f}"),
        ("p99 |dev| ns", lambda r: r["iat"]["interval"]["p99_ns"], "{:.0f}", "{:.0f}"),
        ("off %", lambda r: r["iat"]["interval"]["rate_offset"] * 100, "{:+.3f}", "{:+.2f}")]
headlines = []
for rate in sorted({r["rate"] for r in rows}):
    at = [r for r in rows if r["rate"] == rate]
    shapers = list(dict.fromkeys(r["shaper"] for r in sorted(at, key=lambda r: r["round"])))
    print(f"\nAt {rate:.0f} pps, the median of {nrounds} rounds, each round's figure in brackets "
          "(round 1 first):")
    cols = [f"{name:<30}" for name, *_ in KEYS]
    print(f"{'shaper':<9} " + " ".join(cols) + " lost")
    meds = {}
    for s in shapers:
        rs = sorted((r for r in at if r["shaper"] == s), key=lambda r: r["round"])
        meds[s] = [med(rs, get) for _, get, _, _ in KEYS]
        cells = []
        for (name, get, fmt, rfmt), m in zip(KEYS, meds[s]):
            each = " ".join(rfmt.format(get(r)) for r in rs)
            cells.append(f"{fmt.format(m) + ' [' + each + ']':<30}")
        ls = [lost(r) for r in rs]
        print(f"{s:<9} " + " ".join(cells) + " " + " ".join("?" if n is None else str(n) for n in ls))
    tc = [s for s in shapers if s != "dripgate"]
    if "dripgate" not in meds or not tc:
        headlines.append(f"at {rate:.0f} pps: no headline, it needs dripgate and a tc shaper")
        continue
    # The best tc shaper: the highest median share within ±1 us, then the lower median p99.
    best = max(tc, key=lambda s: (meds[s][1], -meds[s][2]))
    print(f"best tc shaper at {rate:.0f} pps: {best} (highest median share within ±1 us; "
          "ties: lower median p99 |dev|)")
    d, b = meds["dripgate"], meds[best]
    runs = [r for r in at if r["shaper"] in ("dripgate", best)]
    line = (f"at {rate:.0f} pps, at the receiver: dripgate {d[1]:.2f} % within ±1 us "
            f"(p99 dev {d[2]:.0f} ns) vs best tc ({best}) {b[1]:.2f} % ({b[2]:.0f} ns), "
            f"medians of {nrounds} rounds; achieved rate {d[3]:+.1f} % vs {b[3]:+.1f} %")
    # What would make the figures say less than they seem to, said on the headline itself.
    bad = sum(1 for r in runs if lost(r) != 0)
    if bad:
        line += f"; {bad} of these {len(runs)} runs lost frames before the capture (!/?)"
    dry = sum(1 for r in runs if r["min_queue"] <= 0)
    if dry:
        line += (f"; in {dry} of these {len(runs)} runs the shaper's queue ran empty (*): "
                 "there the flood, not the shaper, set some gaps")
    headlines.append(line)
print("\nheadline (gaps at the far veth in the receiver namespace, kernel ns stamps; achieved rate")
print("vs the configured one):")
for h in headlines:
    print("  " + h)
EOF
