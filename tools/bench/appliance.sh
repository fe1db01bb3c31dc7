#!/usr/bin/env bash
# The appliance benchmark: the demo's lab (tools/lab/lab.sh) for longer, with Linux tc beside
# dripgate on the same path. Each round runs the same offered load four times, alternating:
#   direct    nothing shaped (the same dataplane, every rate unlimited);
#   tbf, htb  a tc shaper at dripgate's drip rate as the agents' root qdisc, one frame of burst
#             (tools/lib.sh tc_shaper_add, as tools/bench/tc_pacing.sh sets them), then the
#             unshaped dataplane;
#   dripgate  admission + drip as config/examples/lab.yaml says.
# Prints NIC ring drops, burst factor and p99 inter-arrival jitter side by side (medians, then
# every round) and whether dripgate meets the target: 0 drops where direct drops, burst factor
# within 1.5x of the ideal 1.0x.
#
#   tools/bench/appliance.sh [--build DIR] [--cycles N] [--rounds N] [--out DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build="$root/build"
cycles=20
rounds=3
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --cycles) cycles=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--cycles N] [--rounds N] [--out DIR]" >&2; exit 2 ;;
  esac
done
command -v tc >/dev/null || { echo "appliance: tc missing (iproute2)" >&2; exit 1; }
args=(--build "$build" --cycles "$cycles" --rounds "$rounds" --shapers "direct tbf htb dripgate"
      --target direct,dripgate)
[[ -z "$out" ]] || args+=(--out "$out")
exec bash "$root/tools/lab/lab.sh" "${args[@]}"
