#!/usr/bin/env bash
# Waiting for a gate vs clients retrying on Retry-After: one global model gate (capacity 1,
# 200/s) offered 3x its rate by 20 tenants, 4 of plan gold (queue band 0) and 16 of plan free
# (band 1), each request with a 2 s deadline. Alternating rounds (tools/bench/wait_bench.py
# runs them): requests that wait in dripgate-control, against the same requests answered 429 at
# once and retried after retry_after_ms. Per round: the admitted rate against the gate's, each
# band's time to admission (and the daemon's waited_ms), Jain's index across a band's tenants,
# Redis script calls and HTTP requests per admission, the delay between a token becoming
# available and its admission, and over-admission (admitted vs capacity + rate x span). Prints
# every round, then medians; the table also goes to /tmp/wait_bench.<setup>.txt. Not a test:
# figures only.
#
#   bash tools/bench/wait_bench.sh [--build DIR] [--seconds N] [--rounds N] [--daemons N]
#       [--cluster] [--rate R] [--capacity C] [--gold N] [--free N]
#       [--modes wait,retry[,retry-jitter]]
#
# --seconds (60) of load per round, --rounds (3), --daemons (1) on the same Redis, each tenant
# on daemon i mod N, --cluster: a 3-master Redis Cluster instead of one node (its 4 daemons
# unless --daemons says otherwise), --gold (4) and --free (16) tenants.
set -euo pipefail

source "$(dirname "$0")/../lib.sh"
bench_defaults
seconds=60
daemons=""
cluster=0
rate=200
capacity=1
modes=wait,retry
gold=4
free=16
while [[ $# -gt 0 ]]; do
  [[ $1 != --baseline ]] && bench_flag "$1" "${2-}" && { shift 2; continue; }
  case $1 in
    --daemons) daemons=$2 ;;
    --rate) rate=$2 ;;
    --capacity) capacity=$2 ;;
    --modes) modes=$2 ;;
    --gold) gold=$2 ;;
    --free) free=$2 ;;
    --cluster) cluster=1; shift; continue ;;
    *) echo "usage: $0 [--build DIR] [--seconds N] [--rounds N] [--daemons N] [--cluster]" \
            "[--rate R] [--capacity C] [--gold N] [--free N] [--modes wait,retry[,retry-jitter]]" >&2
       exit 2 ;;
  esac
  [[ -n "${2-}" ]] || { echo "$(basename "$0"): $1 needs a value" >&2; exit 2; }
  shift 2
done
[[ -n $daemons ]] || daemons=$(( cluster ? 4 : 1 ))
cd "$root"
BUILD=$build bootstrap dripgate-control

bench_workdir dripgate-wait-bench
work=$tmp
trap 'exit 130' INT TERM
# At 3x overload a 2 s deadline keeps about 1,200 requests open, each on its own connection,
# in the load generator and in every daemon.
ulimit -n "$(ulimit -Hn)"

if ((cluster)); then
  start_redis_cluster "$work" 3
  redis_ports=$(IFS=,; echo "${cluster_ports[*]}")
  redis_yaml="{ cluster: [$(printf '"127.0.0.1:%s", ' "${cluster_ports[@]}" | sed 's/, $//')], timeout_ms: 1000 }"
  setup="$daemons daemon(s) on a 3-master Redis Cluster"
else
  start_redis "$work"
  redis_ports=$redis_port
  redis_yaml="{ url: \"redis://127.0.0.1:$redis_port/0\", timeout_ms: 1000 }"
  setup="$daemons daemon(s) on one Redis"
fi

# The tenants' own buckets never refuse: the model gate is the only one that does.
{
  echo "redis: $redis_yaml"
  cat <<EOF
control:
  dataplane_socket: /nonexistent/dripgate-wait-bench.sock
plans:
  gold:
    gates: { tenant: { capacity: 1000000, refill_per_s: 100000 } }
    queue: { max_wait_ms: 2000, priority: 0 }
  free:
    gates: { tenant: { capacity: 1000000, refill_per_s: 100000 } }
    queue: { max_wait_ms: 2000, priority: 1 }
global_gates:
  model:
    m: { capacity: $capacity, refill_per_s: $rate }
tenants:
EOF
  for ((i = 0; i < gold; i++)); do printf '  g%02d: { plan: gold }\n' "$i"; done
  for ((i = 0; i < free; i++)); do printf '  f%02d: { plan: free }\n' "$i"; done
} >"$work/control.yaml"

# One worker per daemon: Redis, the daemons and the load share this box's cores.
http_ports=()
for ((i = 0; i < daemons; i++)); do
  port=$(free_port)
  "$build/control/dripgate-control" --config "$work/control.yaml" --listen "127.0.0.1:$port" \
    --threads 1 --log-level warn 2>>"$work/control.log" &
  pids+=($!)
  wait_port "$port" || { cat "$work/control.log" >&2; exit 1; }
  http_ports+=("$port")
done

out=/tmp/wait_bench.$daemons-daemon$( ((cluster)) && echo -cluster || echo -node).txt
python3 "$here/wait_bench.py" --http-ports "$(IFS=,; echo "${http_ports[*]}")" \
  --redis-ports "$redis_ports" --modes "$modes" --rounds "$rounds" --seconds "$seconds" \
  --rate "$rate" --capacity "$capacity" --gold "$gold" --free "$free" --setup "$setup" --out "$out"
