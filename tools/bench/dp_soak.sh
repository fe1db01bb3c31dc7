#!/usr/bin/env bash
# Nothing lost, measured: 10^8 packets (--packets) of IPv4/UDP flows (dp_throughput.sh's
# ip-flows traffic from net_pcap) through two rate-limited classes whose queues overflow
# (depth drops) and age (TTL drops), with the gold class's rate changed over the control socket
# every second. At the end the dataplane drains and prints its final counters; every packet
# received must be accounted for (sent + dropped by cause + still queued) and the mempool must
# be full again. Prints the counts and the two checks; exits 1 when a check fails.
#
#   tools/bench/dp_soak.sh [--build DIR] [--packets N]
set -euo pipefail

source "$(dirname "$0")/../lib.sh"
bench_defaults
packets=100000000
bench_parse "[--build DIR] [--packets N]" packets -- "$@"
need_dataplane "$build"
bench_workdir dp_soak

prefix="dgsoak$$"
python3 "$here/ip_flows.py" pcap "$tmp/flows.pcap"
# gold: 2 Mpps, 1024 deep, 1 ms TTL; default: 1 Mpps, 4096 deep (4 ms of queue), 2 ms TTL.
DP_CLASSES='    gold: { weight: 4, rate_pps: 2000000, queue_depth: 1024, ttl_ms: 1 }
    default: { weight: 1, rate_pps: 1000000, queue_depth: 4096, ttl_ms: 2 }
  classify:
    - { src: "10.1.0.0/16", class: gold }' \
  dp_bench_yaml "$tmp/dp.yaml" "$prefix" "net_pcap0,rx_pcap=$tmp/flows.pcap,infinite_rx=1" \
      "net_null1,no-rx=1" "$tmp/dp.sock" soak
"$build/dataplane/dripgate-dataplane" --config "$tmp/dp.yaml" >"$tmp/dp.out" 2>"$tmp/dp.err" &
dp_pid=$!
pids+=($dp_pid)
python3 "$here/ip_flows.py" tag "$tmp/dp.sock" >&2

start=$(date +%s)
changes=0
while :; do
  rx=$(python3 "$here/dp_telemetry.py" get --prefix "$prefix" /ethdev/stats,0 |
       python3 -c 'import json, sys; print(json.load(sys.stdin)["/ethdev/stats"]["ipackets"])')
  ((rx < packets)) || break
  rate=$(( changes % 2 ? 3000000 : 1000000 ))
  dp_control "$tmp/dp.sock" "{\"op\":\"set_rate\",\"class\":\"gold\",\"rate_pps\":$rate}" >/dev/null
  changes=$((changes + 1))
  sleep 1
done
kill -TERM "$dp_pid"
wait "$dp_pid" || { echo "dripgate-dataplane failed:" >&2; cat "$tmp/dp.err" >&2; exit 1; }
secs=$(( $(date +%s) - start ))

python3 - "$tmp/dp.out" "$changes" "$secs" <<'EOF'
import json, sys
fin = None
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    if isinstance(j, dict):
        fin = j
changes, secs = int(sys.argv[2]), int(sys.argv[3])
rx = fin["rx"]["client"]
tx, drops = fin["tx"], fin["drops"]
sent = tx["shaped"] + tx["pass_non_ip"] + tx["pass_unknown"]
dropped = sum(drops[c] for c in ("malformed", "depth", "ttl", "tx_full", "shutdown", "unknown", "ring"))
queued = fin["queue_len"]
print(f"\nSoak: {rx:,} packets received in {secs} s, {changes} rate changes")
print(f"  sent            {sent:>15,}")
for c in ("depth", "ttl", "tx_full", "shutdown", "malformed", "unknown", "ring"):
    print(f"  drop {c:<10} {drops[c]:>15,}")
print(f"  still queued    {queued:>15,}")
ok_count = sent + dropped + queued == rx
ok_pool = fin.get("mbufs_available") == fin.get("mbufs_total")
print(f"received = sent + dropped + queued: {'yes' if ok_count else 'NO'} "
      f"({sent + dropped + queued:,} vs {rx:,})")
print(f"mempool full again: {'yes' if ok_pool else 'NO'} "
      f"({fin.get('mbufs_available')} of {fin.get('mbufs_total')})")
sys.exit(0 if ok_count and ok_pool else 1)
EOF
