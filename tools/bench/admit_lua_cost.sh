#!/usr/bin/env bash
# Redis's cost of one admission counted in instructions instead of microseconds: redis-server runs
# under valgrind's callgrind, collecting only inside EVALSHA (--toggle-collect=evalShaCommand,
# which is what INFO commandstats' usec_per_call times), and the daemon's own admit call (captured
# with MONITOR, a new request id for every call, as admit_bench.sh replays it) is compared with
# admit_bench.py's minimal bucket script (HMGET, TIME, HSET, EXPIRE) on the same Redis.
# Instruction counts move by about ±0.5 % from run to run (the random request ids and Redis's
# seeded hashing) whatever else the machine is doing, so one round is close where usec_per_call
# needs alternating rounds on a quiet box; they do not weigh
# cache misses, so the ratio in time is lower (admit_bench.sh measures that one). Also prints
# where the admit call's instructions go: parsing numbers (Lua's tonumber, strtod), formatting
# them (Redis and string.format, printf), the keyspace commands (redis.call), and the rest (the
# Lua interpreter, the KEYS/ARGV tables). Not a test: figures only.
#
#   bash tools/bench/admit_lua_cost.sh [--build DIR] [--calls N]
set -euo pipefail

source "$(dirname "$0")/../lib.sh"
bench_defaults
calls=20000
bench_parse "[--build DIR] [--calls N]" calls -- "$@"
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null ||
  { echo "$(basename "$0"): needs valgrind (Debian package valgrind)" >&2; exit 1; }
cd "$root"
BUILD=$build bootstrap dripgate-control
bench_workdir dripgate-lua-cost

redis_port=$(free_port)
valgrind --tool=callgrind --collect-atstart=no --toggle-collect=evalShaCommand \
  --callgrind-out-file="$tmp/callgrind.out" redis-server --port "$redis_port" --bind 127.0.0.1 \
  --save "" --appendonly no --dir "$tmp" --logfile "$tmp/redis.log" 2>"$tmp/valgrind.log" &
pids+=($!)
wait_port "$redis_port" || { tail -3 "$tmp/valgrind.log" >&2; exit 1; }

http_port=$(free_port)
"$build/control/dripgate-control" --config "$here/admit_bench.yaml" \
  --redis "redis://127.0.0.1:$redis_port/0" --listen "127.0.0.1:$http_port" --threads 1 \
  --log-level warn 2>"$tmp/control.log" &
pids+=($!)
wait_port "$http_port"

python3 "$here/admit_lua_cost.py" --redis-port "$redis_port" --redis-pid "${pids[0]}" \
  --http-port "$http_port" --calls "$calls" --dumps "$tmp"
