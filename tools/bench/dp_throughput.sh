#!/usr/bin/env bash
# Dataplane throughput at unlimited rate vs dpdk-testpmd io forwarding, same run, same vdevs
# (net_null), same lcores (main lcore 0 + one forwarding/worker lcore 1), both measured the same
# way: ethdev opackets over the same window, read from each process's DPDK telemetry socket.
#
#   tools/bench/dp_throughput.sh [--build DIR] [--baseline DIR] [--seconds N] [--rounds N]
#   tools/bench/dp_throughput.sh --tenants N [--build DIR] [--seconds N] [--rounds N]
#
# --baseline DIR: also measure DIR's dripgate-dataplane (an older build) in the same session,
# printed as an extra column, so a change is compared with its baseline under the same load.
# The machine is shared and noisy: compare ratios taken in the same run, not absolute Mpps
# across runs.
#
# Three scenarios: "both" (each port receives; io forwarding both ways, dripgate shapes
# client->cluster and forwards the reverse path) and "one-way" (the cluster port's RX is off:
# client->cluster only, where every packet goes through parse, classify and the scheduler).
# net_null frames are all zeroes (not IP), so dripgate runs with --shape-non-ip default: they go
# through the scheduler like IP packets instead of the unshaped pass-through. "ip-flows" is
# one-way with real IPv4/UDP frames from net_pcap (infinite_rx, 1024 flows, ip_flows.py): a
# quarter classified by flows tagged over the control socket, half by a CIDR rule, a quarter
# by unknown_flows, two classes interleaved packet by packet; testpmd reads the same pcap.
# --rounds N (default 3): testpmd and dripgate take turns N times per scenario, each for
# --seconds; the table shows each figure's median over the rounds and the ratio of every round,
# since on a shared VM one window can be several percent off the next.
# Targets (total, dripgate / testpmd): both >= 0.85, one-way >= 0.85, ip-flows >= 0.8.
# A second baseline in every round: testpmd in a mode that reads and writes each frame's headers,
# the floor of any forwarder that looks at a packet (io never touches the frame: its cost is the
# PMDs' alone): macswap (swaps the Ethernet addresses) on the net_null scenarios, 5tswap (parses
# Ethernet/IPv4/UDP and swaps addresses and ports) on ip-flows. Its ratio to io says how much of
# io's rate is left to anything that reads headers on these vdevs, dripgate included.
# A third baseline in every round, the floor: dp_floor (built beside the dataplane) forwards
# with io's loop plus only what the dataplane cannot skip, each frame's length and ethertype
# test (read, the net_null scenarios) or its IPv4/UDP 5-tuple and hash (parse, ip-flows). Its
# /io is the most any dataplane that looks at every frame reaches here; dripgate's /floor is
# what classifying and scheduling cost on top. ip-flows has a fourth in every round, dp_floor
# lookup: parse, then each frame's class from the dataplane's own ClassCache, the least a
# shaper that holds a class per flow does; what dripgate adds to it is grouping, scheduling and
# counting.
#
# --tenants N: the price of fairness instead. Only ip-flows, with every one of its 1024 flows
# tagged into one class (gold) for N tenants (flow i for tenant i mod N), and in every round
# the same dataplane twice on that input: every class `fairness: none` (one FIFO) and the
# default `fairness: tenant` (one sub-queue per tenant). Prints each round's Mpps and ratio
# and the medians. Target: tenant-fair >= 0.9x FIFO with 1,000 tenants.
set -euo pipefail

source "$(dirname "$0")/../lib.sh"
bench_defaults
tenants=0
while [[ $# -gt 0 ]]; do
  bench_flag "$1" "${2-}" && { shift 2; continue; }
  if [[ $1 == --tenants && ${2-} =~ ^[1-9][0-9]*$ ]]; then tenants=$2; shift 2; continue; fi
  echo "usage: $0 [--build DIR] [--baseline DIR] [--seconds N] [--rounds N] [--tenants N]" >&2
  exit 2
done
need_dataplane "$build"
dp="$build/dataplane/dripgate-dataplane"
floor="$build/tools/bench/dp_floor"
[[ -x $floor ]] || { echo "build $floor first (meson compile -C $build dp_floor)" >&2; exit 1; }
[[ -z "$baseline" ]] || need_dataplane "$baseline"
command -v dpdk-testpmd >/dev/null || { echo "dpdk-testpmd not found (Debian package dpdk)" >&2; exit 1; }
bench_workdir dp_throughput
eal=(-l 0-1 --no-huge --no-shconf -m 512 --no-pci)
warmup=2
run_for=$((seconds + warmup + 4))

measure_testpmd() {  # $1, $2 = vdevs of ports 0 and 1, $3 = forward mode
  local prefix="dgbt$$"
  # Non-interactive testpmd forwards until stdin closes.
  (sleep "$run_for") | dpdk-testpmd "${eal[@]}" --file-prefix="$prefix" --vdev="$1" \
      --vdev="$2" -- --forward-mode="$3" --auto-start --nb-cores=1 --total-num-mbufs=16384 \
      >"$tmp/testpmd.log" 2>&1 &
  pids+=($!)
  python3 "$here/dp_telemetry.py" rate --prefix "$prefix" --ports 0,1 --warmup "$warmup" \
      --seconds "$seconds"
  wait "${pids[-1]}" 2>/dev/null || true
  rmdir "/var/run/dpdk/$prefix" 2>/dev/null || true  # testpmd leaves its empty runtime dir
}

measure_floor() {  # $1, $2 = vdevs of ports 0 and 1, $3 = dp_floor's mode
  local prefix="dgbf$$"
  "$floor" --mode "$3" --seconds "$run_for" -- "${eal[@]}" --file-prefix="$prefix" \
      --vdev="$1" --vdev="$2" >"$tmp/floor.out" 2>"$tmp/floor.err" &
  pids+=($!)
  python3 "$here/dp_telemetry.py" rate --prefix "$prefix" --ports 0,1 --warmup "$warmup" \
      --seconds "$seconds"
  wait "${pids[-1]}" || { echo "dp_floor failed:" >&2; cat "$tmp/floor.err" >&2; exit 1; }
}

measure_dripgate() {  # $1, $2 = vdevs of ports 0 and 1, $3 = binary, $4 = scenario,
                      # $5 = the classes' fairness (--tenants only)
  local prefix="dgbd$$" extra=() tag_args=()
  [[ $4 == ip-flows ]] || extra=(--shape-non-ip default)
  rm -f "$tmp/dp.sock"
  if ((tenants > 0)); then
    tag_args=(--tenants "$tenants")
    DP_CLASSES="    gold: { weight: 4, rate_pps: 0, queue_depth: 4096, ttl_ms: 1000, fairness: $5 }
    default: { weight: 1, rate_pps: 0, queue_depth: 4096, ttl_ms: 1000, fairness: $5 }
  classify:
    - { src: \"10.1.0.0/16\", class: gold }" \
      dp_bench_yaml "$tmp/dp.yaml" "$prefix" "$1" "$2" "$tmp/dp.sock" "$4"
  else
    dp_bench_yaml "$tmp/dp.yaml" "$prefix" "$1" "$2" "$tmp/dp.sock" "$4"
  fi
  "$3" --config "$tmp/dp.yaml" "${extra[@]}" --duration "$run_for" \
      >"$tmp/dp.out" 2>"$tmp/dp.err" &
  pids+=($!)
  # Tagged within the warm-up, before the window opens.
  [[ $4 != ip-flows ]] || python3 "$here/ip_flows.py" tag "$tmp/dp.sock" "${tag_args[@]}" >&2
  python3 "$here/dp_telemetry.py" rate --prefix "$prefix" --ports 0,1 --warmup "$warmup" \
      --seconds "$seconds"
  wait "${pids[-1]}" || { echo "dripgate-dataplane failed:" >&2; cat "$tmp/dp.err" >&2; exit 1; }
}

python3 "$here/ip_flows.py" pcap "$tmp/flows.pcap"
if ((tenants > 0)); then
  vdev0="net_pcap0,rx_pcap=$tmp/flows.pcap,infinite_rx=1"; vdev1="net_null1,no-rx=1"
  for round in $(seq "$rounds"); do
    measure_dripgate "$vdev0" "$vdev1" "$dp" ip-flows none >>"$tmp/res.fifo"
    measure_dripgate "$vdev0" "$vdev1" "$dp" ip-flows tenant >>"$tmp/res.fair"
  done
  python3 - "$tmp" "$tenants" "$seconds" "$(uptime)" <<'EOF'
import json, statistics, sys
tmp, tenants, secs, up = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].strip()
fifo = [json.loads(l)["total_opackets_per_s"] for l in open(f"{tmp}/res.fifo") if l.strip()]
fair = [json.loads(l)["total_opackets_per_s"] for l in open(f"{tmp}/res.fair") if l.strip()]
print(f"\nThe price of fairness: ip-flows, all 1024 flows tagged into one class for {tenants} "
      f"tenants, {len(fifo)} alternating rounds of {secs} s, Mpps = ethdev opackets/s ({up})")
for i, (a, b) in enumerate(zip(fifo, fair), 1):
    print(f"round {i}: FIFO {a / 1e6:.3f}  tenant-fair {b / 1e6:.3f}  ratio {b / a:.3f}")
mf, mt = statistics.median(fifo), statistics.median(fair)
ratios = sorted(b / a for a, b in zip(fifo, fair))
print(f"median: FIFO (fairness: none) {mf / 1e6:.3f} Mpps, tenant-fair {mt / 1e6:.3f} Mpps, "
      f"ratio of medians {mt / mf:.3f}, median ratio {statistics.median(ratios):.3f} "
      "(target >= 0.9)")
EOF
  exit 0
fi
for round in $(seq "$rounds"); do
  for scenario in both one-way ip-flows; do
    header_mode=macswap floor_mode=read
    case $scenario in
      both) vdev0="net_null0"; vdev1="net_null1" ;;
      one-way) vdev0="net_null0"; vdev1="net_null1,no-rx=1" ;;
      ip-flows) vdev0="net_pcap0,rx_pcap=$tmp/flows.pcap,infinite_rx=1"; vdev1="net_null1,no-rx=1"
                header_mode=5tswap floor_mode=parse ;;
    esac
    measure_testpmd "$vdev0" "$vdev1" io >>"$tmp/res.$scenario.testpmd"
    measure_testpmd "$vdev0" "$vdev1" "$header_mode" >>"$tmp/res.$scenario.header"
    measure_floor "$vdev0" "$vdev1" "$floor_mode" >>"$tmp/res.$scenario.floor"
    if [[ $scenario == ip-flows ]]; then
      measure_floor "$vdev0" "$vdev1" lookup >>"$tmp/res.$scenario.lookup"
    fi
    measure_dripgate "$vdev0" "$vdev1" "$dp" "$scenario" >>"$tmp/res.$scenario.dripgate"
    if [[ -n "$baseline" ]]; then
      measure_dripgate "$vdev0" "$vdev1" "$baseline/dataplane/dripgate-dataplane" "$scenario" \
          >>"$tmp/res.$scenario.base"
    fi
  done
done

python3 - "$seconds" "$(uptime)" "$tmp" "$rounds" <<'EOF'
import json, os, statistics, sys
secs, up, tmp, rounds = sys.argv[1], sys.argv[2].strip(), sys.argv[3], int(sys.argv[4])

def load(scenario, tool):
    path = os.path.join(tmp, f"res.{scenario}.{tool}")
    if not os.path.exists(path):
        return None
    runs = [json.loads(line) for line in open(path) if line.strip()]
    # The median of every figure over the rounds.
    med = lambda xs: statistics.median(xs)
    return {"total_opackets_per_s": med([r["total_opackets_per_s"] for r in runs]),
            "ports": {p: {"opackets_per_s": med([r["ports"][p]["opackets_per_s"] for r in runs])}
                      for p in runs[0]["ports"]},
            "rounds": [r["total_opackets_per_s"] for r in runs]}

rows = [(s, load(s, "testpmd"), load(s, "dripgate"), load(s, "base"), load(s, "header"),
         load(s, "floor")) for s in ("both", "one-way", "ip-flows")]
has_base = rows[0][3] is not None
modes = {"both": "macswap", "one-way": "macswap", "ip-flows": "5tswap"}
floor_modes = {"both": "read", "one-way": "read", "ip-flows": "parse"}
print(f"\nDataplane throughput, lcores 0-1 (1 worker), median of {rounds} rounds of {secs} s each, "
      "Mpps = ethdev opackets/s")
print(f"({up})")
hdr = (f"{'scenario':<9} {'direction':<16} {'testpmd io':>11} {'hdr mode':>8} {'testpmd hdr':>11} "
       f"{'/io':>6} {'floor':>10} {'/io':>6}")
if has_base:
    hdr += f" {'baseline':>10} {'/io':>6}"
hdr += f" {'dripgate':>10} {'/io':>6} {'/hdr':>6} {'/floor':>6}"
print(hdr)
print("-" * len(hdr))
def cell(t, d):
    return f" {d / 1e6:>10.3f} {d / t if t else 0:>6.3f}"
for name, t, d, b, h, f in rows:
    lines = [(label, t["ports"][port]["opackets_per_s"], d["ports"][port]["opackets_per_s"],
              b["ports"][port]["opackets_per_s"] if b else 0, h["ports"][port]["opackets_per_s"],
              f["ports"][port]["opackets_per_s"])
             for label, port in (("client->cluster", "1"), ("cluster->client", "0"))]
    lines.append(("total", t["total_opackets_per_s"], d["total_opackets_per_s"],
                  b["total_opackets_per_s"] if b else 0, h["total_opackets_per_s"],
                  f["total_opackets_per_s"]))
    for label, tv, dv, bv, hv, fv in lines:
        if tv == 0 and dv == 0:
            continue
        line = (f"{name:<9} {label:<16} {tv / 1e6:>11.3f} {modes[name]:>8}" + cell(tv, hv) +
                cell(tv, fv))
        if has_base:
            line += cell(tv, bv)
        line += cell(tv, dv) + f" {dv / hv if hv else 0:>6.3f} {dv / fv if fv else 0:>6.3f}"
        print(line)
print()
for name, t, d, b, h, f in rows:
    for label, r in (("testpmd " + modes[name], h), ("floor " + floor_modes[name], f),
                     ("baseline", b), ("dripgate", d)):
        if r is None:
            continue
        per = [f"{x / y:.3f}" for x, y in zip(r["rounds"], t["rounds"])]
        print(f"{name:<9} {label}/testpmd io, round by round: {' '.join(per)}")
    per = [f"{x / y:.3f}" for x, y in zip(d["rounds"], h["rounds"])]
    print(f"{name:<9} dripgate/testpmd {modes[name]}, round by round: {' '.join(per)}")
    per = [f"{x / y:.3f}" for x, y in zip(d["rounds"], f["rounds"])]
    print(f"{name:<9} dripgate/floor, round by round: {' '.join(per)}")
    lk = load(name, "lookup")
    if lk is not None:
        per = [f"{x / y:.3f}" for x, y in zip(lk["rounds"], t["rounds"])]
        print(f"{name:<9} floor lookup/testpmd io, round by round: {' '.join(per)}")
        per = [f"{x / y:.3f}" for x, y in zip(d["rounds"], lk["rounds"])]
        print(f"{name:<9} dripgate/floor lookup, round by round: {' '.join(per)}")
        tl, dl = lk["total_opackets_per_s"], d["total_opackets_per_s"]
        print(f"{name:<9} floor lookup, median: {tl / 1e6:.3f} Mpps, "
              f"/io {tl / t['total_opackets_per_s']:.3f}, dripgate/floor lookup {dl / tl:.3f}")
print("ratio /io = / testpmd io in the same run; targets (total): both >= 0.85, one-way >= 0.85, "
      "ip-flows >= 0.8")
print("/hdr = / testpmd in a mode that reads and writes every frame's headers (macswap: Ethernet; "
      "5tswap: Ethernet, IPv4, UDP), same run")
print("floor = dp_floor: testpmd io's loop plus what the dataplane must read of each frame (read: "
      "length and ethertype; parse: length, IPv4/UDP 5-tuple and its hash); /floor = dripgate / "
      "floor, what classifying and scheduling cost")
print("floor lookup = dp_floor --mode lookup: parse, then each frame's class from the dataplane's "
      "ClassCache; dripgate / floor lookup is what grouping, scheduling and counting cost")
EOF
