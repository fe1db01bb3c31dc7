#!/usr/bin/env bash
# The worker lcore's CPU time per forwarded packet, for comparing two builds of
# dripgate-dataplane on this noisy VM: wall-clock Mpps moves by several percent from one window to
# the next when anything else runs, while the worker thread's on-CPU nanoseconds
# (/proc/<pid>/task/<tid>/schedstat) divided by the packets sent in the same window leave out the
# time it was preempted. Same configs and vdevs as dp_throughput.sh (unlimited rates, lcores 0-1,
# single layout): ip-flows (IPv4/UDP flows from net_pcap, tagged flows, a CIDR rule, two
# classes), one-way and both (net_null, every frame shaped). The build and --baseline take turns,
# the order flipping every round; prints every round and the medians.
#
#   tools/bench/dp_cpu_per_packet.sh [--build DIR] [--baseline DIR] [--seconds N] [--rounds N]
#                                    [--scenarios "ip-flows one-way both"]
#
# Cache misses still count (a preempting process may evict the worker's lines), so pairs taken
# on a loaded box are less noisy, not noise-free: use several rounds. Not a test: figures only.
set -euo pipefail

source "$(dirname "$0")/../lib.sh"
bench_defaults
seconds=4
rounds=5
scenarios="ip-flows one-way"
bench_parse "[--build DIR] [--baseline DIR] [--seconds N] [--rounds N] [--scenarios LIST]" \
  scenarios -- "$@"
for scenario in $scenarios; do
  case $scenario in
    ip-flows | one-way | both) ;;
    *) echo "unknown scenario '$scenario' (ip-flows, one-way, both)" >&2; exit 2 ;;
  esac
done
need_dataplane "$build"
[[ -z "$baseline" ]] || need_dataplane "$baseline"
bench_workdir dp_cpu_per_packet
warmup=2

measure() {  # $1 = build dir, $2 = scenario: prints ns of worker CPU per packet sent
  local prefix="dgcp$$" extra=(--shape-non-ip default) vdev0=net_null0 vdev1="net_null1,no-rx=1"
  case $2 in
    both) vdev1=net_null1 ;;
    one-way) ;;
    ip-flows) vdev0="net_pcap0,rx_pcap=$tmp/flows.pcap,infinite_rx=1"; extra=() ;;
  esac
  rm -f "$tmp/dp.sock"
  dp_bench_yaml "$tmp/dp.yaml" "$prefix" "$vdev0" "$vdev1" "$tmp/dp.sock" "$2"
  # No --duration: on a loaded box the telemetry reads can take seconds, and a dataplane that
  # stopped on its own before the second one would leave the window without an end. It is
  # stopped (SIGTERM) once both ends are read.
  "$1/dataplane/dripgate-dataplane" --config "$tmp/dp.yaml" "${extra[@]}" \
    >"$tmp/dp.out" 2>"$tmp/dp.err" &
  local pid=$!
  pids+=("$pid")
  python3 "$here/dp_telemetry.py" get --prefix "$prefix" /ethdev/list >/dev/null
  [[ $2 != ip-flows ]] || python3 "$here/ip_flows.py" tag "$tmp/dp.sock" >&2
  python3 "$here/dp_telemetry.py" rate --prefix "$prefix" --ports 0,1 --warmup "$warmup" \
      --seconds "$seconds" --pid "$pid" >"$tmp/window.json"
  kill -TERM "$pid"
  wait "$pid" || { echo "dripgate-dataplane failed:" >&2; cat "$tmp/dp.err" >&2; exit 1; }
  python3 -c 'import json, sys
w = json.load(open(sys.argv[1]))
if w["total_opackets_per_s"] <= 0:
    sys.exit("a window without packets sent")
print("%.2f" % w["worker_ns_per_packet"])' "$tmp/window.json"
}

python3 "$here/ip_flows.py" pcap "$tmp/flows.pcap"
for round in $(seq "$rounds"); do
  for scenario in $scenarios; do
    order=(build)
    if [[ -n $baseline ]]; then
      if ((round % 2)); then order=(build base); else order=(base build); fi
    fi
    for who in "${order[@]}"; do
      dir=$build
      [[ $who == build ]] || dir=$baseline
      ns=$(measure "$dir" "$scenario")
      echo "round $round $scenario $who: $ns ns/packet" >&2
      echo "$scenario $who $round $ns" >>"$tmp/res"
    done
  done
done

python3 - "$tmp/res" "$seconds" "$(uptime)" <<'EOF'
import collections, statistics, sys
res, secs, up = sys.argv[1], sys.argv[2], sys.argv[3].strip()
by = collections.defaultdict(dict)
for line in open(res):
    scenario, who, rnd, ns = line.split()
    by[scenario].setdefault(who, {})[int(rnd)] = float(ns)
print(f"\nWorker CPU ns per packet sent, {secs} s windows, medians ({up})")
print(f"| scenario | {'baseline':>9} | {'build':>9} | build/baseline | rounds (build; baseline)")
for scenario, d in by.items():
    b = d["build"]
    base = d.get("base")
    rounds = sorted(b)
    base_med = f"{statistics.median(base.values()):>9.2f}" if base else f"{'-':>9}"
    line = f"| {scenario:<8} | {base_med} | {statistics.median(b.values()):>9.2f} | "
    if base:
        line += f"{statistics.median(b[r] / base[r] for r in rounds):>14.3f} | "
        line += " ".join(f"{b[r]:.1f}" for r in rounds) + "; " + \
            " ".join(f"{base[r]:.1f}" for r in rounds)
    else:
        line += f"{'-':>14} | " + " ".join(f"{b[r]:.1f}" for r in rounds)
    print(line)
print("lower is better; build/baseline = median of the rounds' ratios")
EOF
