#!/usr/bin/env bash
# Envoy's rate-limit service benchmark: ShouldRateLimit decisions/s over gRPC (rls_load, the
# async stub with --conns calls outstanding) against POST /v1/admit over HTTP (wrk, --conns
# connections), one daemon serving both, each as a ratio to redis-benchmark -r sending the
# daemon's own admit call (EVALSHA) to the same Redis. Alternating rounds; prints each round,
# then medians (tools/bench/rls_bench.py runs them). Not a test: figures only.
#
#   bash tools/bench/rls_bench.sh [--build DIR] [--seconds N] [--rounds N] [--conns N]
#       [--threads N] [--quick]
#
# --seconds (10) per window, --rounds (3), --conns (32), --threads: daemon threads per front,
# --quick: 2 s windows, 2 rounds (checks that the script works).
set -euo pipefail

source "$(dirname "$0")/../lib.sh"
bench_defaults
conns=32
# As admit_bench.sh: on 2 cores one thread per front is the fair setup.
threads=$(( $(nproc) > 2 ? 2 : 1 ))
while [[ $# -gt 0 ]]; do
  [[ $1 != --baseline ]] && bench_flag "$1" "${2-}" && { shift 2; continue; }
  case $1 in
    --conns) conns=$2 ;;
    --threads) threads=$2 ;;
    --quick) seconds=2; rounds=2; shift; continue ;;
    *) echo "usage: $0 [--build DIR] [--seconds N] [--rounds N] [--conns N] [--threads N]" \
            "[--quick]" >&2; exit 2 ;;
  esac
  [[ -n "${2-}" ]] || { echo "$(basename "$0"): $1 needs a value" >&2; exit 2; }
  shift 2
done
cd "$root"
BUILD=$build bootstrap dripgate-control rls_load

bench_workdir dripgate-rls-bench
work=$tmp
trap 'exit 130' INT TERM

start_redis "$work"
redis_pid=${pids[0]}

# admit_bench.yaml's plan, with the gRPC front on.
http_port=$(free_port)
grpc_port=$(free_port)
sed "s/^control:\$/control:\n  grpc_listen: \"127.0.0.1:$grpc_port\"/" "$here/admit_bench.yaml" \
  >"$work/control.yaml"
"$build/control/dripgate-control" --config "$work/control.yaml" \
  --redis "redis://127.0.0.1:$redis_port/0" --listen "127.0.0.1:$http_port" \
  --threads "$threads" --log-level warn 2>"$work/control.log" &
pids+=($!)
wait_port "$http_port"
wait_port "$grpc_port"

python3 "$here/rls_bench.py" --redis-port "$redis_port" --redis-pid "$redis_pid" \
  --daemon-pid "${pids[-1]}" --http-port "$http_port" --grpc-port "$grpc_port" \
  --rls-load "$build/tools/bench/rls_load" --wrk-script "$here/admit_bench.lua" \
  --rounds "$rounds" --seconds "$seconds" --conns "$conns" --threads "$threads"
