#!/usr/bin/env bash
# Tagging at admission rate: how many tag operations dripgate-dataplane's control socket takes,
# and what steady tagging costs forwarding. One dataplane on the ip-flows scenario of
# dp_throughput.sh (IPv4/UDP flows from net_pcap, a CIDR rule, tagged flows, two classes,
# unlimited rate), lcores 0-1; the control socket is served on lcore 0, beside DPDK's main lcore
# work. In every round:
#   tags/s, one flow per line    20000 flows pipelined (dp_tagging.py burst --batch 1)
#   flows/s, 100 flows per line  the same flows as {"op":"tag","flows":[...]} (--batch 100)
#   forwarding Mpps              a window without tagging, then one while 20000 flows/s are
#                                tagged (alternating); target: at most 10 % lower
#
#   tools/bench/dp_tagging.sh [--build DIR] [--seconds N] [--rounds N] [--rate N]
set -euo pipefail

source "$(dirname "$0")/../lib.sh"
bench_defaults
seconds=5
rate=20000
bench_parse "[--build DIR] [--seconds N] [--rounds N] [--rate N]" rate -- "$@"
need_dataplane "$build"
bench_workdir dp_tagging

prefix="dgtag$$"
python3 "$here/ip_flows.py" pcap "$tmp/flows.pcap"
DP_FLOW_TABLE_SIZE=131072 dp_bench_yaml "$tmp/dp.yaml" "$prefix" \
    "net_pcap0,rx_pcap=$tmp/flows.pcap,infinite_rx=1" "net_null1,no-rx=1" "$tmp/dp.sock" ip-flows
duration=$((rounds * (4 * seconds + 20) + 10))
"$build/dataplane/dripgate-dataplane" --config "$tmp/dp.yaml" --duration "$duration" \
    >"$tmp/dp.out" 2>"$tmp/dp.err" &
pids+=($!)
python3 "$here/ip_flows.py" tag "$tmp/dp.sock" >&2

mpps() {  # forwarding Mpps over one window (client->cluster opackets)
  python3 "$here/dp_telemetry.py" rate --prefix "$prefix" --ports 0,1 --warmup 1 \
      --seconds "$seconds" | python3 -c 'import json, sys; print(json.load(sys.stdin)["total_opackets_per_s"] / 1e6)'
}
for round in $(seq "$rounds"); do
  single=$(python3 "$here/dp_tagging.py" burst "$tmp/dp.sock" --flows 20000 --batch 1)
  batched=$(python3 "$here/dp_tagging.py" burst "$tmp/dp.sock" --flows 20000 --batch 100)
  idle=$(mpps)
  python3 "$here/dp_tagging.py" steady "$tmp/dp.sock" --rate "$rate" --seconds $((seconds + 2)) \
      >"$tmp/steady.$round" &
  busy=$(mpps)
  wait $!
  echo "{\"single\": $single, \"batched\": $batched, \"idle\": $idle, \"busy\": $busy," \
       "\"steady\": $(cat "$tmp/steady.$round")}" | tee -a "$tmp/rounds" >&2
done
kill "${pids[0]}" 2>/dev/null || true

python3 - "$tmp/rounds" "$rate" "$(uptime)" <<'EOF'
import json, statistics, sys
rounds = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rate, up = float(sys.argv[2]), sys.argv[3].strip()
med = statistics.median
single = [r["single"]["lines_per_s"] for r in rounds]
batched = [r["batched"]["flows_per_s"] for r in rounds]
idle = [r["idle"] for r in rounds]
busy = [r["busy"] for r in rounds]
drop = [100 * (1 - b / i) for i, b in zip(idle, busy)]
errors = sum(r["single"]["errors"] + r["batched"]["errors"] + r["steady"]["errors"] for r in rounds)
print(f"\nTagging on dripgate-dataplane's control socket, {len(rounds)} rounds, medians ({up})")
print(f"| figure                                   |    median | rounds")
print(f"|------------------------------------------|-----------|-------")
print(f"| tags/s, one flow per line (pipelined)    | {med(single):>9.0f} | " + " ".join(f"{x:.0f}" for x in single))
print(f"| flows/s, 100 flows per line              | {med(batched):>9.0f} | " + " ".join(f"{x:.0f}" for x in batched))
print(f"| forwarding Mpps, no tagging              | {med(idle):>9.3f} | " + " ".join(f"{x:.3f}" for x in idle))
print(f"| forwarding Mpps, tagging {rate:>6.0f} flows/s | {med(busy):>9.3f} | " + " ".join(f"{x:.3f}" for x in busy))
print(f"| forwarding lost to tagging, %            | {med(drop):>9.1f} | " + " ".join(f"{x:.1f}" for x in drop) + "  (target <= 10)")
print(f"tag answers not ok: {errors}")
EOF
