#!/usr/bin/env bash
# What one core of each kind carries, for sizing a box: the split layout with the RX lcore alone
# on CPU 1 and the drip lcore on CPU 0 (beside the main lcore, which sleeps), each scenario
# beside dpdk-testpmd io forwarding on one core with the same input, rounds alternating.
#
#   rx    IPv4/UDP flows (dp_throughput.sh's ip-flows input: tags, a CIDR rule, two classes) from
#         net_pcap: the RX lcore parses, looks up and classifies every packet. When the
#         hand-over ring drops almost nothing, the RX lcore is the limit: Mpps per RX core.
#   drip  net_null's all-zero frames shaped as class default (--shape-non-ip): the RX lcore's
#         work is small, so the drip lcore (ring dequeue, scheduler, TX at unlimited rate) is
#         the limit when the ring drops: Mpps per drip core.
#
#   tools/bench/dp_cores.sh [--build DIR] [--seconds N] [--rounds N]
#
# Prints medians and each round, and cores needed for 10/25/100 Gb/s at 64/512/1500-byte
# frames from the medians (on paper: RX lcores scale with RSS; the drip is one lcore per
# cluster port). net_pcap and net_null cost CPU of their own (a NIC's DMA does not), so the
# figures are conservative for the RX side.
set -euo pipefail

source "$(dirname "$0")/../lib.sh"
bench_defaults
seconds=5
bench_parse "[--build DIR] [--seconds N] [--rounds N]" -- "$@"
need_dataplane "$build"
command -v dpdk-testpmd >/dev/null || { echo "dpdk-testpmd not found (Debian package dpdk)" >&2; exit 1; }
bench_workdir dp_cores
python3 "$here/ip_flows.py" pcap "$tmp/flows.pcap"
warmup=2
run_for=$((seconds + warmup + 4))

vdev0_of() {
  case $1 in
    rx) echo "net_pcap0,rx_pcap=$tmp/flows.pcap,infinite_rx=1" ;;
    drip) echo "net_null0" ;;
  esac
}

measure_testpmd() {  # $1 = scenario
  local prefix="dgct$$"
  (sleep "$run_for") | dpdk-testpmd -l 0-1 --no-huge --no-shconf -m 512 --no-pci \
      --file-prefix="$prefix" --vdev="$(vdev0_of "$1")" --vdev=net_null1,no-rx=1 -- \
      --forward-mode=io --auto-start --nb-cores=1 --total-num-mbufs=16384 \
      >"$tmp/testpmd.log" 2>&1 &
  pids+=($!)
  python3 "$here/dp_telemetry.py" rate --prefix "$prefix" --ports 1 --warmup "$warmup" \
      --seconds "$seconds"
  wait "${pids[-1]}" 2>/dev/null || true
  rmdir "/var/run/dpdk/$prefix" 2>/dev/null || true
}

measure_dripgate() {  # $1 = scenario; prints the rate line, then the final stats line
  local prefix="dgcd$$" extra=() scenario=ip-flows
  [[ $1 == rx ]] || { extra=(--shape-non-ip default); scenario=one-way; }
  rm -f "$tmp/dp.sock" "$tmp/fin.json"
  DP_LCORES='{ rx: 1, drip: 2 }' DP_EAL_LCORES='"--lcores", "0@0,1@1,2@0"' \
    dp_bench_yaml "$tmp/dp.yaml" "$prefix" "$(vdev0_of "$1")" net_null1,no-rx=1 "$tmp/dp.sock" \
    "$scenario"
  "$build/dataplane/dripgate-dataplane" --config "$tmp/dp.yaml" "${extra[@]}" \
      --duration "$run_for" --stats-file "$tmp/fin.json" >"$tmp/dp.out" 2>"$tmp/dp.err" &
  pids+=($!)
  [[ $1 != rx ]] || python3 "$here/ip_flows.py" tag "$tmp/dp.sock" >&2
  python3 "$here/dp_telemetry.py" rate --prefix "$prefix" --ports 1 --warmup "$warmup" \
      --seconds "$seconds"
  wait "${pids[-1]}" || { echo "dripgate-dataplane failed:" >&2; cat "$tmp/dp.err" >&2; exit 1; }
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(json.dumps({"rx": j["rx"]["client"], "ring": j["drops"]["ring"]}))' "$tmp/fin.json"
}

for round in $(seq "$rounds"); do
  for s in rx drip; do
    measure_testpmd "$s" >>"$tmp/res.$s.testpmd"
    measure_dripgate "$s" >>"$tmp/res.$s.dripgate"
  done
done

python3 - "$tmp" "$rounds" "$seconds" "$(uptime)" <<'PY'
import json, math, statistics, sys
tmp, rounds, secs, up = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].strip()
def lines(path):
    return [json.loads(l) for l in open(path) if l.strip()]
print(f"\nPer-core forwarding, split layout (RX lcore on CPU 1, drip on CPU 0), median of {rounds} "
      f"rounds of {secs} s, Mpps = port 1 opackets/s\n({up})")
print(f"{'core':<6}{'testpmd io':>11}{'dripgate':>10}{'ratio':>7}{'ring drops':>12}   rounds (dripgate/testpmd)")
med = {}
for s in ("rx", "drip"):
    t = [r["total_opackets_per_s"] / 1e6 for r in lines(f"{tmp}/res.{s}.testpmd")]
    d_all = lines(f"{tmp}/res.{s}.dripgate")
    d = [r["total_opackets_per_s"] / 1e6 for r in d_all if "total_opackets_per_s" in r]
    fin = [r for r in d_all if "ring" in r]
    drops = statistics.median(f["ring"] / max(f["rx"], 1) for f in fin)
    med[s] = statistics.median(d)
    per = " ".join(f"{x:.2f}/{y:.2f}" for x, y in zip(d, t))
    print(f"{s:<6}{statistics.median(t):>11.2f}{med[s]:>10.2f}{med[s] / statistics.median(t):>7.2f}"
          f"{drops:>11.1%}   {per}")
print("\nCores needed at line rate (on paper, from the medians above; frame + 20 B on the wire):")
print(f"{'link':<9}{'frame':>7}{'Mpps':>9}{'RX lcores':>11}{'drip lcores':>13}")
for gbps in (10, 25, 100):
    for frame in (64, 512, 1500):
        mpps = gbps * 1e9 / ((frame + 20) * 8) / 1e6
        rx = math.ceil(mpps / med["rx"])
        drip = math.ceil(mpps / med["drip"])
        print(f"{gbps:>4} Gb/s{frame:>7}{mpps:>9.2f}{rx:>11}{drip:>13}")
print("The drip is one lcore per cluster port: where more than one is needed, split the cluster"
      " side over several ports (one dataplane each) or raise drip.batch.")
PY
