#!/usr/bin/env bash
# Every packet scheduled: dripgate-dataplane vs DPDK's QoS scheduler example (qos_sched), both
# in one shape, on the same CPUs, with the same input; rounds alternate the two; medians, every
# round, and each class's share of what left, so the table shows both did the same job.
#
# The shape: one shaped port, three classes sharing it by weight 4:2:1, no class capped.
#   dripgate  drip.rate_pps = the port rate; classes gold (weight 4), silver (2), default (1),
#             rate_pps 0 (no cap), queue_depth 4096, byte-based DRR; classify rules by
#             destination 10.9.1.0/24, 10.9.2.0/24, 10.9.3.0/24.
#   qos_sched tools/bench/qos_sched_profile.cfg: one subport, one pipe, the subport, pipe and
#             best-effort class all at the port rate; classes 0-11 (strict priority) off; the
#             best-effort class's queues 0, 1, 2 (WRR weights 4 2 1, queue 3 unused), 4096 each.
# Why the best-effort queues and not three traffic classes: rte_sched's classes 0-11 are strict
# priority (class 0 first whenever it has packets), so three of them would be a priority
# scheduler, and a cap per class would make it a rate limiter. Its one weighted level is the
# best-effort class's byte-level WRR over its four queues: work-conserving, an empty queue
# skipped, each backlogged queue getting bytes in proportion to its weight, as dripgate's
# byte-based DRR over its ready classes. Both run over one token bucket (rte_sched: subport and
# pipe at the port rate; dripgate: the port's departure timeline).
#
# The input (dp_scheduled.py pcap): 1023 IPv4/UDP flows from net_pcap (infinite_rx), 64-byte
# frames, a third of them in each class, interleaved frame by frame. Each frame is in the same
# class for both: dripgate reads its destination, qos_sched its byte 41 (app_thread.c,
# get_pkt_sched: the destination's last byte in the double-VLAN frames the example was written
# for; in these untagged frames the UDP checksum's low byte, made by the generator to be the
# class: 0, 1, 2 mod 4, with a true checksum). The VLAN fields it masks for subport and pipe
# are 0 with one of each. Out of port 1, net_null (RX off). Both get a pool of 16384 packet
# buffers (dripgate mbufs 16383, qos_sched --msz 16384: its default of 2 M does not fit without
# hugepages); each keeps its own burst sizes (qos_sched's defaults: RX 64, scheduler enqueue
# 64, dequeue 32; dripgate: 32, drip batch 32 as in dp_bench_yaml).
#
# The CPUs (the same for both; no source change to qos_sched). qos_sched's argument check
# (args.c, app_parse_args) wants RX and worker on different lcores ("rx thread and worker thread
# cannot share same core"), the main lcore on neither, and each RX and worker lcore *id* below
# app_cpu_core_count(), the machine's CPUs: on 2 CPUs, ids 0 and 1. Ids are not CPUs: EAL's
# --lcores maps them. So both run the split layout, the one qos_sched has:
#   CPU 1  RX: qos_sched lcore 0 (app_rx_thread: RX, classify, ring); dripgate lcore 1 (RX,
#          parse, classify, hand-over ring)
#   CPU 0  scheduler and TX: qos_sched lcore 1 (app_mixed_thread: ring, rte_sched enqueue and
#          dequeue, TX); dripgate lcore 2 (the drip: ring, class queues, DRR, timeline, TX),
#          beside the main lcore: qos_sched lcore 2 (--mnc 2 --main-lcore 2, interactive mode,
#          waiting on stdin) and dripgate lcore 0 (control socket, telemetry).
#
# qos_sched is built at bench time, unmodified, from Debian's dpdk-doc examples (not committed),
# with the example Makefile's `static` target, since dripgate links DPDK statically
# (ARCHITECTURE §5): pkg-config's static link line names -lsystemd, which the link does not need
# and only libsystemd-dev provides; it is left out of that line (no code changes).
#
# The port rate, the same for both in a round: --rate, or found in every round (this shared
# machine's pace moves between runs by up to 2x): from 90 % of what dripgate forwarded
# unshaped in this layout at the start (at most what the vdevs' 10 Gb/s carries at
# qos_sched's 88 bytes a frame, 64 + 24 overhead; later rounds from two steps above the
# previous round's rate), 10 % lower at a time until dripgate's shares in a 2 s trial are
# within 0.3 percentage points of the weights'. With a third of the input in each class,
# 4:2:1 comes out only while every queue stays backlogged (a class that runs dry gets what it
# brought and leaves the rest of its share to the others). dripgate's drip lcore serves due
# departures first and takes from the ring only what fits before the next one, so near its
# limit its queues hold what one pass brought and its shares follow the input: the trials
# find the rate just below that, the most it schedules by weight. qos_sched's worker takes 64
# from its ring for every 32 it dequeues, so its queues fill at any rate it cannot reach.
# Whatever rate one cannot reach, it does not; one that keeps up shows the port rate, within
# 10 % of its limit (the output says which did). A round whose window shows dripgate's shares
# more than a point off runs again 10 % lower (twice at most), as a trial can pass in a calm
# moment the window does not have. Target: dripgate >= 1.5x qos_sched.
#
# The measure (dp_scheduled.py run): ethdev opackets of port 1 and ipackets of port 0 over the
# same window, from DPDK telemetry; each class's departures from the scheduler's own counters
# (dripgate's /dripgate/classes, qos_sched's `stats port 1 subport 0 pipe 0` on its stdin).
#
#   tools/bench/dp_scheduled.sh [--build DIR] [--seconds N] [--rounds N] [--rate PPS]
set -euo pipefail

source "$(dirname "$0")/../lib.sh"
bench_defaults
seconds=5
rate=""
bench_parse "[--build DIR] [--seconds N] [--rounds N] [--rate PPS]" rate -- "$@"
need_dataplane "$build"
examples=/usr/share/dpdk/examples/qos_sched
[[ -d $examples ]] || { echo "$examples not found: apt-get install dpdk-doc" >&2; exit 1; }
command -v stdbuf >/dev/null || { echo "stdbuf not found (Debian package coreutils)" >&2; exit 1; }
profile="$here/qos_sched_profile.cfg"
bench_workdir dp_scheduled

cp -r "$examples" "$tmp/qos_sched"
make -C "$tmp/qos_sched" static \
    LDFLAGS_STATIC="$(pkg-config --static --libs libdpdk | sed 's/ -lsystemd / /')" \
    >"$tmp/qos_sched.make.log" 2>&1 || { cat "$tmp/qos_sched.make.log" >&2; exit 1; }
qos="$tmp/qos_sched/build/qos_sched"
python3 "$here/dp_scheduled.py" pcap "$tmp/flows.pcap"
pcap="net_pcap0,rx_pcap=$tmp/flows.pcap,infinite_rx=1"
warmup=2

DP_CLASSES='    gold: { weight: 4, rate_pps: 0, queue_depth: 4096, ttl_ms: 1000 }
    silver: { weight: 2, rate_pps: 0, queue_depth: 4096, ttl_ms: 1000 }
    default: { weight: 1, rate_pps: 0, queue_depth: 4096, ttl_ms: 1000 }
  classify:
    - { dst: "10.9.1.0/24", class: gold }
    - { dst: "10.9.2.0/24", class: silver }
    - { dst: "10.9.3.0/24", class: default }' \
DP_LCORES='{ rx: 1, drip: 2 }' DP_EAL_LCORES='"--lcores", "0@0,1@1,2@0"' \
  dp_bench_yaml "$tmp/dp.yaml" "dgsd$$" "$pcap" "net_null1,no-rx=1" "$tmp/dp.sock" three-classes

dp_config() {  # $1 = port rate in pps (0: unlimited) -> $tmp/dp.$1.yaml
  sed "s/drip: { rate_pps: 0,/drip: { rate_pps: $1,/" "$tmp/dp.yaml" >"$tmp/dp.$1.yaml"
}

qos_profile() {  # $1 = port rate in pps -> $tmp/qos_sched.$1.cfg, every rate in bytes/s
  sed "s/1250000000/$(($1 * (64 + 24)))/g" "$profile" >"$tmp/qos_sched.$1.cfg"
}

qos_command() {  # $1 = port rate in pps: prints qos_sched's command line, one word a line
  # stdbuf: in interactive mode its tables go to stdout with printf, a file here, which stdio
  # would otherwise hold until 4 KiB have piled up. timeout: a guard; dp_scheduled.py stops it.
  printf '%s\n' timeout -s KILL $((seconds + warmup + 30)) stdbuf -oL "$qos" \
    --lcores 0@1,1@0,2@0 --main-lcore 2 --no-huge --no-shconf -m 512 --no-pci \
    --file-prefix="dgsq$$" --vdev="$pcap" --vdev=net_null1,no-rx=1 -- \
    -i --pfc 0,1,0,1 --mnc 2 --msz 16384 --cfg "$tmp/qos_sched.$1.cfg"
}

measure_qos_sched() {  # $1 = port rate in pps, $2 = seconds
  local cmd
  qos_profile "$1"
  mapfile -t cmd < <(qos_command "$1")
  python3 "$here/dp_scheduled.py" run --prefix "dgsq$$" --warmup "$warmup" --seconds "$2" \
      --kind qos_sched --log "$tmp/qos.log" -- "${cmd[@]}"
  rm -rf "/var/run/dpdk/dgsq$$"  # stopped by a signal, it leaves its runtime directory
}

measure_dripgate() {  # $1 = port rate in pps (0: unlimited), $2 = seconds
  dp_config "$1"
  rm -f "$tmp/dp.sock"
  python3 "$here/dp_scheduled.py" run --prefix "dgsd$$" --warmup "$warmup" --seconds "$2" \
      --kind dripgate --log "$tmp/dp.log" -- "$build/dataplane/dripgate-dataplane" \
      --config "$tmp/dp.$1.yaml" --duration $((seconds + warmup + 30))
}

field() {  # $1 = JSON line, $2 = Python expression over it as r
  python3 -c "import json, sys; r = json.loads(sys.argv[1]); print($2)" "$1"
}

find_rate() {  # $1 = the rate to start from: prints the rate its trials found
  local r=$1 trial try
  for try in $(seq 12); do
    trial=$(measure_dripgate "$r" 2)
    echo "  trial at $r pps: dripgate $(field "$trial" 'round(r["out_pps"] / 1e6, 3)') Mpps, shares $(field "$trial" '"/".join(f"{x * 100:.1f}" for x in r["shares"])') %" >&2
    [[ $(field "$trial" 'int(r["off"] <= 0.3)') == 1 ]] && break
    ((try < 12)) || { echo "  dripgate's shares off the weights even at $r pps" >&2; break; }
    r=$((r * 90 / 100))
  done
  echo "$r"
}

top=""
if [[ -z $rate ]]; then
  unshaped=$(field "$(measure_dripgate 0 "$seconds")" 'r["out_pps"]')
  # net_null and net_pcap say 10 Gb/s, which qos_sched takes as its port rate: no more than
  # that carries (64-byte frames + its 24 bytes of overhead).
  cap=$((1250000000 * 99 / 100 / 88))
  top=$(python3 -c "print(int(min(float('$unshaped') * 0.9, $cap)))")
  echo "dripgate unshaped: $(python3 -c "print(round(float('$unshaped') / 1e6, 3))") Mpps; trials from $top pps" >&2
fi
for round in $(seq "$rounds"); do
  r=$rate
  [[ -z $top ]] || r=$(find_rate "$top")
  for attempt in 1 2 3; do
    q=$(measure_qos_sched "$r" "$seconds")
    d=$(measure_dripgate "$r" "$seconds")
    # A trial can pass in a calm moment the window does not have: the round again, lower.
    [[ -z $top || $(field "$d" 'int(r["off"] <= 1)') == 1 || $attempt == 3 ]] && break
    echo "round $round at $r pps: dripgate's shares $(field "$d" '"/".join(f"{x * 100:.1f}" for x in r["shares"])') %, again 10 % lower" >&2
    r=$((r * 90 / 100))
  done
  [[ -z $top ]] || top=$((r * 100 / 81 < cap ? r * 100 / 81 : cap))  # the next round's first trial
  echo "round $round at $r pps: qos_sched $(field "$q" 'round(r["out_pps"] / 1e6, 3)') Mpps, dripgate $(field "$d" 'round(r["out_pps"] / 1e6, 3)') Mpps" >&2
  echo "$r" >>"$tmp/rounds.rate"
  echo "$q" >>"$tmp/rounds.qos_sched"
  echo "$d" >>"$tmp/rounds.dripgate"
done
rate=$r  # the last round's, for the commands printed below

python3 - "$tmp" "$seconds" "$(uptime)" <<'EOF'
import json, statistics, sys
tmp, secs, up = sys.argv[1], sys.argv[2], sys.argv[3].strip()
runs = {k: [json.loads(l) for l in open(f"{tmp}/rounds.{k}") if l.strip()]
        for k in ("qos_sched", "dripgate")}
rates = [int(l) for l in open(f"{tmp}/rounds.rate") if l.strip()]
med = statistics.median
weights = (4, 2, 1)

print(f"\nEvery packet scheduled, port rate {med(rates) / 1e6:.3f} Mpps (median; each round's "
      f"below), three classes by weight 4:2:1, 64-byte IPv4/UDP frames (a third per class in), "
      f"{len(rates)} rounds of {secs} s, medians ({up})")
print("CPU 1: RX alone (qos_sched lcore 0, app_rx_thread; dripgate lcore 1, RX and classify); "
      "CPU 0: scheduler + TX (qos_sched lcore 1, app_mixed_thread; dripgate lcore 2, the drip) "
      "beside the main lcore (qos_sched lcore 2; dripgate lcore 0)")
print(f"| {'program':<9} | {'Mpps out':>8} | {'Mpps in':>7} | {'class 0 (4)':>11} | "
      f"{'class 1 (2)':>11} | {'class 2 (1)':>11} | off (points)")
print(f"| {'weights':<9} | {'':>8} | {'':>7} | " +
      " | ".join(f"{w / sum(weights) * 100:>10.1f}%" for w in weights) + " |")
for k, rs in runs.items():
    print(f"| {k:<9} | {med(r['out_pps'] for r in rs) / 1e6:>8.3f} | "
          f"{med(r['in_pps'] for r in rs) / 1e6:>7.3f} | " +
          " | ".join(f"{med(r['shares'][c] for r in rs) * 100:>10.1f}%" for c in range(3)) +
          f" | {med(r['off'] for r in rs):.1f}")
ratios = [d["out_pps"] / q["out_pps"] if q["out_pps"] else float("inf")
          for q, d in zip(runs["qos_sched"], runs["dripgate"])]
print(f"dripgate / qos_sched, Mpps out: {med(ratios):.2f} (median of rounds); target >= 1.5")
print("Mpps out / port rate (median of rounds): " + ", ".join(
    f"{k} {med(r['out_pps'] / x for r, x in zip(rs, rates)):.2f}" for k, rs in runs.items()) +
      " (one that keeps up shows the port rate, not its limit)")
print("Mpps out: port 1's ethdev opackets; in: port 0's ipackets; class n: its share of what "
      "left (the scheduler's counters); off: the largest distance of a share from its weight's")
print("\nround by round (port rate; Mpps out; shares of class 0/1/2 in %):")
for i, (x, q, d) in enumerate(zip(rates, runs["qos_sched"], runs["dripgate"]), 1):
    cell = lambda r: (f"{r['out_pps'] / 1e6:6.3f} Mpps, " +
                      "/".join(f"{x * 100:.1f}" for x in r["shares"]) + f" (off {r['off']:.1f})")
    print(f"round {i} at {x / 1e6:.3f} Mpps: qos_sched {cell(q)} | dripgate {cell(d)} | "
          f"ratio {ratios[i - 1]:.2f}")
EOF
echo
echo "qos_sched profile: $profile, every 1250000000 replaced by the port rate x 88 bytes"
echo "(the last round's: $((rate * 88)) for $rate pps)"
echo "qos_sched command (built from $examples, dpdk-doc $(dpkg-query -W -f='${Version}' dpdk-doc 2>/dev/null || echo '?')):"
echo "  $(qos_command "$rate" | tr '\n' ' ' | sed "s|$tmp|\$tmp|g")"
echo "dripgate command: $build/dataplane/dripgate-dataplane --config \$tmp/dp.yaml --duration $((seconds + warmup + 30))"
echo "dripgate config (\$tmp/dp.yaml, the last round's):"
dp_config "$rate"
sed -e "s|$tmp|\$tmp|g" -e 's/^/  /' "$tmp/dp.$rate.yaml"
