#!/usr/bin/env bash
# Dataplane throughput at unlimited rate vs dpdk-testpmd io forwarding, same run, same vdevs
# (net_null), same lcores (main lcore 0 + one forwarding/worker lcore 1), both measured the same
# way: ethdev opackets over the same window, read from each process's DPDK telemetry socket.
#
#   tools/bench/dp_throughput.sh [--build DIR] [--seconds N]
#
# Two scenarios: "both" (each port receives; io forwarding both ways, dripgate shapes
# client->cluster and forwards the reverse path) and "one-way" (the cluster port's RX is off:
# client->cluster only, where every packet goes through parse, classify and the scheduler).
# net_null frames are all zeroes (not IP), so dripgate runs with --shape-non-ip default: they go
# through the scheduler like IP packets instead of the unshaped pass-through.
# Target: dripgate / testpmd >= 0.7.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build="$root/build"
seconds=10
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--seconds N]" >&2; exit 2 ;;
  esac
done
dp="$build/dataplane/dripgate-dataplane"
[[ -x "$dp" ]] || { echo "build $dp first (meson compile -C $build dripgate-dataplane)" >&2; exit 1; }
command -v dpdk-testpmd >/dev/null || { echo "dpdk-testpmd not found (Debian package dpdk)" >&2; exit 1; }
tmp=$(mktemp -d /tmp/dp_throughput.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
eal=(-l 0-1 --no-huge --no-shconf -m 512 --no-pci)
warmup=2
run_for=$((seconds + warmup + 4))

measure_testpmd() {  # $1 = vdev of port 1
  local prefix="dgbt$$"
  # Non-interactive testpmd forwards until stdin closes.
  (sleep "$run_for") | dpdk-testpmd "${eal[@]}" --file-prefix="$prefix" --vdev=net_null0 \
      --vdev="$1" -- --forward-mode=io --auto-start --nb-cores=1 --total-num-mbufs=16384 \
      >"$tmp/testpmd.log" 2>&1 &
  pids+=($!)
  python3 "$here/dp_telemetry.py" rate --prefix "$prefix" --ports 0,1 --warmup "$warmup" \
      --seconds "$seconds"
  wait "${pids[-1]}" 2>/dev/null || true
  rmdir "/var/run/dpdk/$prefix" 2>/dev/null || true  # testpmd leaves its empty runtime dir
}

measure_dripgate() {  # $1 = vdev of port 1
  local prefix="dgbd$$"
  cat >"$tmp/dp.yaml" <<EOF
dataplane:
  eal: ["-l", "0-1", "--no-huge", "--no-shconf", "-m", "512", "--no-pci", "--file-prefix=$prefix",
        "--vdev=net_null0", "--vdev=$1"]
  ports: { client: 0, cluster: 1 }
  lcores: { rx: 1, drip: 1 }
  mbufs: 16383
  drip: { rate_pps: 0, rate_bps: 0, batch: 32, max_catchup: 8 }
  classes:
    default: { weight: 1, rate_pps: 0, queue_depth: 4096, ttl_ms: 1000 }
  unknown_flows: default
  control_socket: $tmp/dp.sock
EOF
  "$dp" --config "$tmp/dp.yaml" --shape-non-ip default --duration "$run_for" \
      >"$tmp/dp.out" 2>"$tmp/dp.err" &
  pids+=($!)
  python3 "$here/dp_telemetry.py" rate --prefix "$prefix" --ports 0,1 --warmup "$warmup" \
      --seconds "$seconds"
  wait "${pids[-1]}" || { echo "dripgate-dataplane failed:" >&2; cat "$tmp/dp.err" >&2; exit 1; }
}

declare -A res
for scenario in both one-way; do
  if [[ $scenario == both ]]; then vdev1="net_null1"; else vdev1="net_null1,no-rx=1"; fi
  res[$scenario.testpmd]=$(measure_testpmd "$vdev1")
  res[$scenario.dripgate]=$(measure_dripgate "$vdev1")
done

python3 - "$seconds" "${res[both.testpmd]}" "${res[both.dripgate]}" \
    "${res[one-way.testpmd]}" "${res[one-way.dripgate]}" <<'EOF'
import json, sys
secs = sys.argv[1]
rows = [("both", json.loads(sys.argv[2]), json.loads(sys.argv[3])),
        ("one-way", json.loads(sys.argv[4]), json.loads(sys.argv[5]))]
print(f"\nDataplane throughput, net_null, lcores 0-1 (1 worker), {secs} s window, Mpps = ethdev opackets/s")
print(f"{'scenario':<9} {'direction':<16} {'testpmd io':>11} {'dripgate':>10} {'ratio':>7}")
for name, t, d in rows:
    for label, port in (("client->cluster", "1"), ("cluster->client", "0")):
        tp, dp = t["ports"][port]["opackets_per_s"] / 1e6, d["ports"][port]["opackets_per_s"] / 1e6
        if tp == 0 and dp == 0:
            continue
        print(f"{name:<9} {label:<16} {tp:>11.3f} {dp:>10.3f} {dp / tp if tp else 0:>7.3f}")
    tt, dt = t["total_opackets_per_s"] / 1e6, d["total_opackets_per_s"] / 1e6
    print(f"{name:<9} {'total':<16} {tt:>11.3f} {dt:>10.3f} {dt / tt if tt else 0:>7.3f}")
print("target: ratio >= 0.7 (total)")
EOF
