#!/usr/bin/env bash
# Every packet scheduled: dripgate-dataplane vs DPDK's QoS scheduler example (qos_sched), same
# vdevs, same input (dp_throughput.sh's IPv4/UDP flows from net_pcap, 64-byte frames), the port
# rate set just below what dripgate forwards unshaped, so its queues stay non-empty and DRR
# picks every departure. qos_sched gets the same rate (its subport and pipe token buckets, in
# bytes/s with its 24-byte frame overhead); whatever it cannot reach, it does not. Rounds
# alternate the two; medians and every round's ratio. Target: dripgate >= 1.5x qos_sched.
#
# qos_sched is built at bench time from Debian's dpdk-doc examples (not committed). Its argument
# check counts the machine's CPUs and wants three distinct lcores (main, RX, worker+TX), which a
# 2-CPU box cannot give; the copy built here checks lcore ids against RTE_MAX_LCORE instead
# (validation only) and runs with --lcores 0@0,1@1,2@0: RX alone on CPU 1, the scheduler on CPU 0
# beside the main lcore, which sleeps. dripgate runs its single layout: one worker lcore does RX,
# classify, queue and drip on CPU 1.
#
#   tools/bench/dp_scheduled.sh [--build DIR] [--seconds N] [--rounds N] [--rate PPS]
# --rate: the port rate (default: 90 % of dripgate's unshaped rate, measured first, at most what
# the 10 Gb/s the vdevs report carries).
set -euo pipefail

source "$(dirname "$0")/../lib.sh"
bench_defaults
seconds=5
rate=""
bench_parse "[--build DIR] [--seconds N] [--rounds N] [--rate PPS]" rate -- "$@"
need_dataplane "$build"
examples=/usr/share/dpdk/examples/qos_sched
[[ -d $examples ]] || { echo "$examples not found: install dpdk-doc (tools/setup-deps.sh)" >&2; exit 1; }
bench_workdir dp_scheduled

cp -r "$examples" "$tmp/qos_sched"
sed -i 's/\tnb_lcores = app_cpu_core_count();/\tnb_lcores = RTE_MAX_LCORE;/' "$tmp/qos_sched/args.c"
grep -q 'nb_lcores = RTE_MAX_LCORE;' "$tmp/qos_sched/args.c" ||
  { echo "qos_sched's lcore check changed: adapt $0" >&2; exit 1; }
make -C "$tmp/qos_sched" -j 2 >"$tmp/qos_sched.make.log" 2>&1 ||
  { cat "$tmp/qos_sched.make.log" >&2; exit 1; }
qos="$tmp/qos_sched/build/qos_sched"
python3 "$here/ip_flows.py" pcap "$tmp/flows.pcap"
pcap="net_pcap0,rx_pcap=$tmp/flows.pcap,infinite_rx=1"
warmup=2
run_for=$((seconds + warmup + 4))

window() {  # $1 = telemetry prefix: client->cluster Mpps over one window
  python3 "$here/dp_telemetry.py" rate --prefix "$1" --ports 0,1 --warmup "$warmup" \
      --seconds "$seconds" | python3 -c 'import json, sys; print(json.load(sys.stdin)["ports"]["1"]["opackets_per_s"])'
}

measure_dripgate() {  # $1 = port rate in pps (0: unlimited)
  local prefix="dgsd$$"
  rm -f "$tmp/dp.sock"
  dp_bench_yaml "$tmp/dp.yaml" "$prefix" "$pcap" "net_null1,no-rx=1" "$tmp/dp.sock" ip-flows
  sed -i "s/drip: { rate_pps: 0,/drip: { rate_pps: $1,/" "$tmp/dp.yaml"
  "$build/dataplane/dripgate-dataplane" --config "$tmp/dp.yaml" --duration "$run_for" \
      >"$tmp/dp.out" 2>"$tmp/dp.err" &
  pids+=($!)
  python3 "$here/ip_flows.py" tag "$tmp/dp.sock" >&2
  window "$prefix"
  wait "${pids[-1]}" || { echo "dripgate-dataplane failed:" >&2; cat "$tmp/dp.err" >&2; exit 1; }
}

measure_qos_sched() {  # $1 = port rate in pps
  local prefix="dgsq$$" bps
  bps=$(( $1 * (64 + 24) ))  # bytes/s at qos_sched's frame overhead
  sed -e "s/1250000000/$bps/g" -e "s/305175/$bps/g" "$tmp/qos_sched/profile.cfg" >"$tmp/qos.cfg"
  timeout "$run_for" "$qos" --lcores "0@0,1@1,2@0" --no-huge --no-shconf -m 1024 --no-pci \
      --file-prefix="$prefix" --vdev="$pcap" --vdev="net_null1,no-rx=1" -- --pfc "0,1,1,2" \
      --mnc 0 --msz 16384 --cfg "$tmp/qos.cfg" >"$tmp/qos.log" 2>&1 &
  pids+=($!)
  window "$prefix"
  wait "${pids[-1]}" 2>/dev/null || true  # ended by timeout
  rm -rf "/var/run/dpdk/$prefix"
}

if [[ -z $rate ]]; then
  unshaped=$(measure_dripgate 0)
  # net_null says 10 Gb/s, which qos_sched takes as its port rate: no more than that carries
  # (64-byte frames + its 24 bytes of overhead).
  rate=$(python3 -c "print(int(min(float('$unshaped') * 0.9, 1.25e9 / 88 * 0.99)))")
  echo "dripgate unshaped: $(python3 -c "print(round(float('$unshaped') / 1e6, 3))") Mpps; port rate $rate pps" >&2
fi
for round in $(seq "$rounds"); do
  q=$(measure_qos_sched "$rate")
  d=$(measure_dripgate "$rate")
  echo "round $round: qos_sched $(python3 -c "print(round($q / 1e6, 3))") Mpps, dripgate $(python3 -c "print(round($d / 1e6, 3))") Mpps" >&2
  echo "$q $d" >>"$tmp/rounds"
done

python3 - "$tmp/rounds" "$rate" "$(uptime)" <<'EOF'
import statistics, sys
rounds = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
rate, up = int(sys.argv[2]), sys.argv[3].strip()
q = statistics.median(r[0] for r in rounds)
d = statistics.median(r[1] for r in rounds)
ratios = [r[1] / r[0] if r[0] else float("inf") for r in rounds]
print(f"\nEvery packet scheduled, port rate {rate / 1e6:.3f} Mpps, 64-byte IPv4/UDP frames, "
      f"{len(rounds)} rounds, medians ({up})")
print(f"| qos_sched Mpps | dripgate Mpps | ratio (median of rounds) | rounds")
print(f"| {q / 1e6:>14.3f} | {d / 1e6:>13.3f} | {statistics.median(ratios):>24.2f} | " +
      " ".join(f"{x:.2f}" for x in ratios))
print("target: dripgate >= 1.5x qos_sched")
EOF
