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
#   tools/bench/appliance.sh [--build DIR] [--seconds N] [--rounds N] [--load L] [--out DIR]
# (--seconds: cycles, one a second, per phase; default 20, 3 rounds. --load: lab.sh's
# bursts (default), overload or highrate.)
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
bench_defaults
seconds=20
out=""
load=bursts
usage="usage: $0 [--build DIR] [--seconds N] [--rounds N] [--load L] [--out DIR]"
while [[ $# -gt 0 ]]; do
  [[ $1 != --baseline ]] && bench_flag "$1" "${2-}" && { shift 2; continue; }
  case "$1" in
    --out) out=$2; shift 2 ;;
    --load) load=$2; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
command -v tc >/dev/null || { echo "appliance: tc missing (iproute2)" >&2; exit 1; }
args=(--build "$build" --load "$load" --cycles "$seconds" --rounds "$rounds"
      --shapers "direct tbf htb dripgate" --target direct,dripgate)
[[ -z "$out" ]] || args+=(--out "$out")
exec bash "$root/tools/lab/lab.sh" "${args[@]}"
