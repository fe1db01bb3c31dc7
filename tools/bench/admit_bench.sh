#!/usr/bin/env bash
# Admission benchmark: dripgate-control's POST /v1/admit under wrk against the same Redis doing
# the same work without the daemon, in alternating rounds (tools/bench/admit_bench.py runs them):
#   decisions/s at --conns     vs redis-benchmark -r sending the daemon's own admit call
#                                 (captured with MONITOR, a new request id for every call)
#   p50/p99 at about half peak vs redis-benchmark at the same concurrency
#   Redis usec_per_call        vs a minimal bucket script (HMGET, TIME, HSET, EXPIRE) on the
#                                 same Redis (INFO commandstats after CONFIG RESETSTAT)
#   daemon CPU per decision    vs Redis CPU per decision in the same window (/proc/<pid>/stat),
#                                 and the daemon's system time alone: the kernel's share
#   HTTP floor                 nginx answering the daemon's answer from memory under the same
#                                 wrk, each round: the CPU per request that the kernel's
#                                 loopback TCP and one read and one send cost any HTTP/1.1
#                                 server here, and the daemon's CPU above it
#   Redis bytes per open reservation (used_memory over --memory-calls admissions)
#   five gates: decisions/s of a request passing the tenant's and the user's buckets, the
#                 tenant's token-rate bucket, a model's and a tool's global buckets (three script
#                 calls, one per hash slot) vs redis-benchmark -r sending those three calls at once
#   quota periods: Redis usec_per_call of the admit call of a plan with a daily and a monthly
#                 quota vs the bench plan's (monthly only), alternating redis-benchmark windows
#                 (--periods-only: this figure alone)
# The plans (admit_bench.yaml): a tenant bucket + a monthly quota (and the five-gate plan),
# generous enough that nothing is refused. Prints every round, then medians and a summary
# table. Not a test: figures only.
#
# --cluster measures scale-out instead (tools/bench/admit_cluster.py runs it): 1 daemon on one
# Redis node and 2 daemons on a 3-master Redis Cluster, each beside redis-benchmark EVALSHA of
# the daemons' own call on the same topology, alternating rounds; and Redis bytes and keys per
# tenant with --tenants (100,000) tenants on each.
#
#   bash tools/bench/admit_bench.sh [--build DIR] [--seconds N] [--rounds N] [--conns N]
#       [--half-conns N] [--threads N] [--memory-calls N] [--unix] [--quick] [--periods-only]
#   bash tools/bench/admit_bench.sh --cluster [--build DIR] [--seconds N] [--rounds N]
#       [--conns N] [--tenants N] [--quick]
#
# --seconds (10) per window, --rounds (3), --conns (32) wrk/redis-benchmark connections at peak,
# --half-conns: skip the probe for the half-peak concurrency, --threads: daemon workers,
# --unix: Redis over a unix socket (unix:// URL for the daemon, redis-benchmark -s),
# --quick: 2 s windows, 1 round, 20000 memory calls (checks that the script works).
set -euo pipefail

source "$(dirname "$0")/../lib.sh"
bench_defaults
conns=32
half_conns=0
memory_calls=100000
unix=0
periods_only=()
cluster=0
tenants=100000
# Daemon worker threads. Redis (single-threaded), the load generator and the daemon share this
# box: on 2 cores one worker is the fair setup (a second one only adds context switches).
threads=$(( $(nproc) > 2 ? 2 : 1 ))
while [[ $# -gt 0 ]]; do
  [[ $1 != --baseline ]] && bench_flag "$1" "${2-}" && { shift 2; continue; }
  case $1 in
    --conns) conns=$2 ;;
    --half-conns) half_conns=$2 ;;
    --threads) threads=$2 ;;
    --memory-calls) memory_calls=$2 ;;
    --tenants) tenants=$2 ;;
    --unix) unix=1; shift; continue ;;
    --periods-only) periods_only=(--periods-only); shift; continue ;;
    --cluster) cluster=1; shift; continue ;;
    --quick) seconds=2; rounds=1; memory_calls=20000; tenants=20000; shift; continue ;;
    *) echo "usage: $0 [--build DIR] [--seconds N] [--rounds N] [--conns N] [--half-conns N]" \
            "[--threads N] [--memory-calls N] [--unix] [--cluster] [--tenants N] [--quick]" \
            "[--periods-only]" >&2
       exit 2 ;;
  esac
  [[ -n "${2-}" ]] || { echo "$(basename "$0"): $1 needs a value" >&2; exit 2; }
  shift 2
done
cd "$root"
BUILD=$build bootstrap dripgate-control
((cluster)) || command -v nginx >/dev/null ||
  { echo "nginx not found (Debian package nginx-light; tools/setup-deps.sh installs it)" >&2; exit 1; }

bench_workdir dripgate-bench
work=$tmp
trap 'exit 130' INT TERM

if ((cluster)); then
  # One worker per daemon: the daemons, five Redis processes and the load share this box.
  daemon() {  # daemon CONFIG: one dripgate-control on a free port; sets http_port
    http_port=$(free_port)
    "$build/control/dripgate-control" --config "$1" --listen "127.0.0.1:$http_port" --threads 1 \
      --log-level warn 2>>"$work/control.log" &
    pids+=($!)
    wait_port "$http_port" || { cat "$work/control.log" >&2; exit 1; }
  }
  mkdir -p "$work/single"
  start_redis "$work/single"
  sed "s|^redis: .*|redis: { url: \"redis://127.0.0.1:$redis_port/0\", timeout_ms: 1000 }|" \
    "$here/admit_bench.yaml" >"$work/single.yaml"
  single_port=$redis_port
  daemon "$work/single.yaml"
  single_http=$http_port
  start_redis_cluster "$work" 3
  seeds=$(printf '"127.0.0.1:%s", ' "${cluster_ports[@]}")
  sed "s|^redis: .*|redis: { cluster: [${seeds%, }], timeout_ms: 1000 }|" \
    "$here/admit_bench.yaml" >"$work/cluster.yaml"
  daemon "$work/cluster.yaml"
  cluster_http=$http_port
  daemon "$work/cluster.yaml"
  cluster_http+=",$http_port"
  python3 "$here/admit_cluster.py" --single-port "$single_port" --single-http-port "$single_http" \
    --cluster-ports "$(IFS=,; echo "${cluster_ports[*]}")" --cluster-http-ports "$cluster_http" \
    --wrk-script "$here/admit_bench.lua" --rounds "$rounds" --seconds "$seconds" \
    --conns "$conns" --tenants "$tenants"
  exit
fi

start_redis "$work" --unixsocket "$work/redis.sock"
redis_pid=${pids[0]}
if ((unix)); then
  redis=(--redis-socket "$work/redis.sock")
  url="unix://$work/redis.sock"
else
  redis=(--redis-port "$redis_port")
  url="redis://127.0.0.1:$redis_port/0"
fi

http_port=$(free_port)
"$build/control/dripgate-control" --config "$here/admit_bench.yaml" --redis "$url" \
  --listen "127.0.0.1:$http_port" --threads "$threads" --log-level warn 2>"$work/control.log" &
pids+=($!)
wait_port "$http_port"

python3 "$here/admit_bench.py" "${redis[@]}" --redis-pid "$redis_pid" --daemon-pid "${pids[-1]}" \
  --http-port "$http_port" --wrk-script "$here/admit_bench.lua" --rounds "$rounds" \
  --seconds "$seconds" --conns "$conns" --half-conns "$half_conns" --threads "$threads" \
  --memory-calls "$memory_calls" --work-dir "$work" \
  --five-body '{"tenant":"ws-five","user":"u-bench","model":"m-bench","tool":"t-bench","tokens":100}' \
  --periods-body '{"tenant":"ws-periods","tokens":1}' "${periods_only[@]}"
