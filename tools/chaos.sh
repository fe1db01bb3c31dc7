#!/usr/bin/env bash
# What a hostile or broken neighbour does to dripgate, measured: the standing chaos suite. Not a
# test (nothing here passes or fails); run it before and after a change and compare the tables.
#
#   tools/chaos.sh [--build DIR] [--seconds N]
#                  [--only "kill stop stall-grpc auth idle-tcp idle-unix rotate outage"]
#                  [--idle-conns N] [--outage-s N]
#
# Scenarios, each on a fresh redis-server and daemon, one table each:
#   kill       Redis SIGKILLed under 32 clients doing POST /v1/admit, restarted on the same port
#              a second later (AOF, appendfsync always: every answered script survives);
#   stop       Redis SIGSTOPped for 2 s, then SIGCONT;
#   stall-grpc Redis SIGSTOPped for 20 s under 500 ShouldRateLimit calls a second (gRPC, open
#              loop: rls_load --rate, from this tree's build), timeout_ms 50, a tenant bucket
#              refilling faster than the load (capacity 1000, 600/s: a correct run never
#              refuses): the daemon's RSS (before, peak, end), the failures' latency once the
#              stall is seen, the most bytes queued in the kernel towards Redis (ss Send-Q), and
#              the calls answered OVER_LIMIT after SIGCONT (each one wrong: stale calls emptied
#              the bucket). Runs 30 s whatever --seconds says;
#   auth       dripgate-control given a wrong Redis password for 5 s, then Redis is switched to
#              that password (CONFIG SET requirepass): Redis connections and daemon log lines
#              while it was wrong, and how soon the daemon recovers;
#   idle-tcp   --idle-conns (20,000) TCP connections to dripgate-control that never send a byte,
#              each one it closes opened again, the daemon under a 20,000-descriptor limit: its
#              CPU time and log growth over 10 s, and whether a legitimate POST /v1/admit (one a
#              second) is answered;
#   idle-unix  100 idle clients on dripgate-dataplane's control socket (net_null vdevs, no
#              hugepages): whether a new client still gets {"op":"stats"} answered, how long
#              it waits;
#   rotate     an API key rotated under load (control.auth: tenant_keys, tools/chaos/rotate.py):
#              8 clients admitting with a registry tenant's key, the key rotated over the admin
#              API 3 s in with a 6 s overlap, the clients moving to the new key halfway through it
#              and one (100 requests a second) staying on the old: requests with a valid key
#              refused (must be 0), and the old key's requests after the overlap admitted (must be
#              0) and refused 401 (Redis's timeout_ms 500 here: the scenario is about keys);
#   outage     a long outage under `on_failure: local` (not in the default list; --only outage):
#              wrk, 4 connections, each admitting (estimate 100) and settling (60) as agents
#              do, Redis SIGKILLed 3 s in for --outage-s (30) and restarted from its AOF, the load
#              going on 20 s after: the daemon's peak RSS and its RSS once drained, the
#              journal's peak size on disk and once drained, the records made, the drain time
#              (Redis back to dripgate_journal_pending 0) and the drift: the quota counter
#              Redis ends with against what the clients were told (100 per admission, 60 per
#              settled one), which must be 0.
# The load scenarios run --seconds (15), the fault 3 s in. "Charged for failed requests"
# compares what Redis holds afterwards with the 200 answers: the tenant's bucket (capacity 1e9,
# a refill too slow to count) gives the tokens taken, plus the month's quota, the reservations
# and the leases (one of each per admission).
#
# --build DIR runs DIR's dripgate-control and dripgate-dataplane (e.g. an older build) with this
# tree's load generators. Only idle-unix needs root (DPDK); without it, it is skipped.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bench_defaults
# bench_defaults assumes tools/bench/; this script sits in tools/.
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build"
seconds=15
only="kill stop stall-grpc auth idle-tcp idle-unix rotate"
idle_conns=20000
outage_s=30
usage="usage: $0 [--build DIR] [--seconds N] [--only \"kill stop stall-grpc auth idle-tcp idle-unix rotate outage\"] [--idle-conns N] [--outage-s N]"
while [[ $# -gt 0 ]]; do
  [[ $1 == --build || $1 == --seconds ]] && bench_flag "$1" "${2-}" && { shift 2; continue; }
  case "$1" in
    --only) only=$2; shift 2 ;;
    --idle-conns) idle_conns=$2; shift 2 ;;
    --outage-s) outage_s=$2; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
((seconds >= 10)) || { echo "chaos: --seconds must be at least 10 (a fault begins 3 s in)" >&2; exit 2; }
control="$build/control/dripgate-control"
[[ -x "$control" ]] ||
  { echo "build $control first (meson compile -C $build dripgate-control)" >&2; exit 1; }
chaos="$root/tools/chaos"
work=$(mktemp -d /tmp/dripgate-chaos.XXXXXX)
pids=()
cleanup() {
  # A stopped redis-server must be continued to act on SIGTERM.
  for pid in "${pids[@]}"; do kill -CONT "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# forget PID: a process of ours that has ended leaves `pids`, so that the EXIT trap never
# signals a number the system may have given to someone else's process since.
forget() {
  local keep=() pid
  for pid in "${pids[@]}"; do [[ $pid == "$1" ]] || keep+=("$pid"); done
  pids=("${keep[@]}")
}

# stop PID: ends one process this script started and waits for it.
stop() {
  kill -CONT "$1" 2>/dev/null || true
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  forget "$1"
}

now() { date +%s.%N; }

# background CMD...: runs CMD as one of ours and waits for it, so that SIGTERM reaches the trap
# at once and the trap ends it.
background() {
  "$@" &
  local pid=$!
  pids+=("$pid")
  wait "$pid"
  forget "$pid"
}

# redis DIR PORT [ARGS...]: a redis-server on PORT keeping DIR's append-only file; sets redis_pid.
redis() {
  local dir=$1 port=$2
  shift 2
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly yes --appendfsync always \
    --dir "$dir" --logfile "$dir/redis.log" "$@" &
  redis_pid=$!
  pids+=("$redis_pid")
  wait_port "$port"
}

# rcli PORT ARGS...: redis-cli as the test's own client (REDISCLI_AUTH holds the password).
rcli() { local port=$1; shift; redis-cli -p "$port" --raw "$@"; }

# The configuration every scenario runs: one tenant whose every admission takes one token from a
# bucket that does not refill within a run, reserves 1 quota token and takes a lease. Only keys
# every build knows (no limits a later build may add): the daemon runs on its defaults.
cat >"$work/chaos.yaml" <<EOF
redis: { url: "redis://127.0.0.1:6379/0", timeout_ms: 50 }
control:
  listen: "127.0.0.1:8080"
  threads: 2
  dataplane_socket: $work/no-dataplane.sock
plans:
  chaos:
    gates:
      tenant: { capacity: 1000000000, refill_per_s: 0.001 }
    quota: { tokens_per_month: 1000000000000, reservation_ttl_s: 3600 }
    concurrency: { max_streams: 1000000000, lease_s: 3600 }
tenants:
  ws-chaos: { plan: chaos }
EOF

# daemon URL LOG: dripgate-control on a free port; sets http_port and control_pid.
daemon() {
  http_port=$(free_port)
  "$control" --config "$work/chaos.yaml" --redis "$1" --listen "127.0.0.1:$http_port" 2>"$2" &
  control_pid=$!
  pids+=("$control_pid")
  wait_port "$http_port"
}

# charge PORT: what Redis holds for the tenant, as JSON (tokens taken, quota, reservations,
# leases).
charge() {
  local port=$1 tk quota=0 q
  tk=$(rcli "$port" hget 'dg:{t:ws-chaos}:tb:tenant' tk)
  for q in $(rcli "$port" --scan --pattern 'dg:{t:ws-chaos}:q:*'); do
    quota=$((quota + $(rcli "$port" get "$q")))
  done
  # Open reservations: the "#" count of each reservation window (lua/lib_reservation.lua).
  local open=0
  for w in $(rcli "$port" --scan --pattern 'dg:{t:ws-chaos}:r:*'); do
    open=$((open + $(rcli "$port" hget "$w" '#')))
  done
  python3 -c 'import json, sys
tk = sys.argv[1]
print(json.dumps({"tokens": round(1e9 - float(tk)) if tk else 0, "quota": int(sys.argv[2]),
                  "reservations": int(sys.argv[3]), "leases": int(sys.argv[4])}))' \
    "$tk" "$quota" "$open" \
    "$(rcli "$port" zcard 'dg:{t:ws-chaos}:leases')" >"$work/charge.json"
}

# load_scenario NAME TITLE: Redis, the daemon and 32 clients for $seconds; the fault (function
# fault_NAME) begins 3 s in and writes "fault"/"healed" stamps to $work/events.
load_scenario() {
  local name=$1 title=$2 dir="$work/$1" port
  mkdir -p "$dir"
  port=$(free_port)
  : >"$work/events"
  extra=()
  setup_"$name" "$dir" "$port"
  python3 "$chaos/load.py" --port "$http_port" --clients 32 --seconds "$seconds" \
    --out "$work/load.json" &
  local load=$!
  pids+=("$load")
  "fault_$name" "$dir" "$port"
  wait "$load"
  forget "$load"
  charge "$port"
  extra+=("daemon log lines over the run=$(wc -l <"$dir/control.log")")
  python3 "$chaos/report.py" load "$title" "$work/load.json" "$work/events" "$work/charge.json" \
    "${extra[@]}"
  stop "$control_pid"
  stop "$redis_pid"
  unset REDISCLI_AUTH
}

setup_kill() { redis "$1" "$2"; daemon "redis://127.0.0.1:$2/0" "$1/control.log"; }
fault_kill() {
  sleep 3
  echo "$(now) fault" >>"$work/events"
  kill -KILL "$redis_pid"
  wait "$redis_pid" 2>/dev/null || true
  forget "$redis_pid"
  sleep 1
  redis "$1" "$2"
  echo "$(now) healed" >>"$work/events"
}

setup_stop() { setup_kill "$@"; }
fault_stop() {
  sleep 3
  echo "$(now) fault" >>"$work/events"
  kill -STOP "$redis_pid"
  sleep 2
  kill -CONT "$redis_pid"
  echo "$(now) healed" >>"$work/events"
}

# The daemon is wrong from its start: the fault is the whole time until Redis takes its password.
setup_auth() {
  export REDISCLI_AUTH=chaos-right-password
  redis "$1" "$2" --requirepass "$REDISCLI_AUTH"
  conns0=$(rcli "$2" info stats | awk -F: '/^total_connections_received/ {print $2+0}')
  echo "$(now) fault" >>"$work/events"
  daemon "redis://:chaos-wrong-password@127.0.0.1:$2/0" "$1/control.log"
}
fault_auth() {
  local t0 conns lines
  read -r t0 _ <"$work/events"
  sleep "$(python3 -c "import time; print(max(0, $t0 + 5 - time.time()))")"
  # The test's own INFO connection is one of those counted.
  conns=$(($(rcli "$2" info stats | awk -F: '/^total_connections_received/ {print $2+0}') - conns0 - 1))
  lines=$(wc -l <"$1/control.log")
  rcli "$2" config set requirepass chaos-wrong-password >/dev/null
  export REDISCLI_AUTH=chaos-wrong-password
  echo "$(now) healed" >>"$work/events"
  extra+=("Redis connections while wrong (5 s)=$conns"
          "daemon log lines while wrong (5 s)=$lines")
}

# stall_grpc: its own daemon (gRPC front on, the bucket above), rls_load from this tree's build.
stall_grpc() {
  local dir="$work/stall-grpc" port grpc_port rls="$root/build/tools/bench/rls_load"
  [[ -x "$rls" ]] || { echo -e "\n== stall-grpc skipped: build $rls first"; return; }
  mkdir -p "$dir"
  port=$(free_port)
  grpc_port=$(free_port)
  http_port=$(free_port)
  cat >"$dir/control.yaml" <<EOF
redis: { url: "redis://127.0.0.1:$port/0", timeout_ms: 50 }
control:
  listen: "127.0.0.1:$http_port"
  grpc_listen: "127.0.0.1:$grpc_port"
  threads: 2
  dataplane_socket: $work/no-dataplane.sock
plans:
  stall:
    gates:
      tenant: { capacity: 1000, refill_per_s: 600 }
tenants:
  ws-chaos: { plan: stall }
EOF
  redis "$dir" "$port"
  "$control" --config "$dir/control.yaml" 2>"$dir/control.log" &
  control_pid=$!
  pids+=("$control_pid")
  wait_port "$grpc_port"
  "$rls" --target "127.0.0.1:$grpc_port" --tenant ws-chaos --rate 500 --calls 100000 \
    --seconds 30 --log "$dir/calls.log" >"$dir/rls.out" &
  local load=$!
  pids+=("$load")
  # RSS (kB) and the bytes in the kernel's send queues towards Redis, every 100 ms.
  (while kill -0 "$load" 2>/dev/null; do
     echo "$(now) $(awk '/^VmRSS/ {print $2}' "/proc/$control_pid/status")" \
       "$(ss -tnH state established "( dport = :$port )" | awk '{q += $2} END {print q + 0}')"
     sleep 0.1
   done) >"$dir/samples" &
  local sampler=$!
  sleep 3
  echo "$(now) fault" >"$dir/events"
  kill -STOP "$redis_pid"
  sleep 20
  kill -CONT "$redis_pid"
  echo "$(now) healed" >>"$dir/events"
  wait "$load"
  forget "$load"
  wait "$sampler" || true
  python3 "$chaos/report.py" stall \
    "Redis SIGSTOP for 20 s under 500 gRPC calls/s, timeout_ms 50" "$dir/events" "$dir/calls.log" "$dir/samples"
  stop "$control_pid"
  stop "$redis_pid"
}

# The daemon gets the issue's 20,000 descriptors (or the hard limit when lower); idle.py spreads
# the clients over as many processes as their own limit requires.
idle_tcp() {
  local daemon_nofile dir="$work/idle-tcp" rpid
  daemon_nofile=$(($(ulimit -Hn) < 20000 ? $(ulimit -Hn) : 20000))
  mkdir -p "$dir"
  start_redis "$dir"
  rpid=${pids[-1]}
  http_port=$(free_port)
  (ulimit -n "$daemon_nofile"
   exec "$control" --config "$work/chaos.yaml" --redis "redis://127.0.0.1:$redis_port/0" \
     --listen "127.0.0.1:$http_port" 2>"$dir/control.log") &
  control_pid=$!
  pids+=("$control_pid")
  wait_port "$http_port"
  background python3 "$chaos/idle.py" tcp --port "$http_port" --conns "$idle_conns" --hold 10 \
    --pid "$control_pid" --log "$dir/control.log" >"$work/idle.json"
  python3 "$chaos/report.py" idle-tcp \
    "$idle_conns idle TCP connections to dripgate-control (daemon ulimit -n $daemon_nofile)" \
    "$work/idle.json"
  stop "$control_pid"
  stop "$rpid"
  rm -f "$dir/control.log"
}

idle_unix() {
  local dp="$build/dataplane/dripgate-dataplane" dir="$work/idle-unix"
  if [[ "$(id -u)" != 0 ]]; then
    echo -e "\n== idle-unix skipped: dripgate-dataplane (DPDK) needs root"
    return
  fi
  [[ -x "$dp" ]] || { echo -e "\n== idle-unix skipped: build $dp first"; return; }
  mkdir -p "$dir"
  cat >"$dir/dp.yaml" <<EOF
dataplane:
  eal: ["-l", "0-1", "--no-huge", "--no-shconf", "-m", "256", "--no-pci",
        "--file-prefix=dgchaos$$", "--vdev=net_null0", "--vdev=net_null1"]
  ports: { client: 0, cluster: 1 }
  lcores: { rx: 1, drip: 1 }
  mbufs: 8191
  drip: { rate_pps: 20000, rate_bps: 0, batch: 1, max_catchup: 8 }
  classes:
    default: { weight: 1, rate_pps: 0, queue_depth: 1024, ttl_ms: 1000 }
  unknown_flows: default
  control_socket: $dir/dp.sock
EOF
  "$dp" --config "$dir/dp.yaml" >"$dir/dp.out" 2>"$dir/dp.err" &
  local dp_pid=$!
  pids+=("$dp_pid")
  local ready=0
  for _ in $(seq 1 200); do
    [[ -S "$dir/dp.sock" ]] && dp_control "$dir/dp.sock" '{"op":"stats"}' 2>/dev/null |
      grep -q '"ok":true' && { ready=1; break; }
    kill -0 "$dp_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ $ready == 0 ]]; then
    echo "chaos: dripgate-dataplane did not answer on $dir/dp.sock:" >&2
    cat "$dir/dp.err" >&2
    exit 1
  fi
  background python3 "$chaos/idle.py" unix --path "$dir/dp.sock" --conns 100 --hold 15 \
    >"$work/idle.json"
  python3 "$chaos/report.py" idle-unix "100 idle clients on dripgate-dataplane's control socket" \
    "$work/idle.json"
  stop "$dp_pid"
}

# metric PORT NAME: a gauge's value from dripgate-control's /metrics ("" when not there).
metric() {
  curl -s "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n {print $2; exit}'
}

# drained PORT TRIES: waits (0.2 s a try) until the daemon's journal holds nothing pending.
drained() {
  local i
  for ((i = 0; i < $2; i++)); do
    [[ "$(metric "$1" dripgate_journal_pending)" == 0 ]] && return 0
    sleep 0.2
  done
  return 1
}

# The outage: RSS and journal bytes sampled every 0.5 s, the drain timed from Redis's restart.
outage() {
  local dir="$work/outage" port wrk_pid sampler t_back t_drained=0 records quota=0 q
  command -v wrk >/dev/null || { echo -e "\n== outage skipped: needs wrk"; return; }
  mkdir -p "$dir"
  port=$(free_port)
  cat >"$dir/outage.yaml" <<EOF
redis: { url: "redis://127.0.0.1:$port/0", timeout_ms: 50, on_failure: local,
         journal: $dir/journal }
control: { listen: "127.0.0.1:8080", threads: 2, dataplane_socket: $dir/no-dataplane.sock }
plans:
  chaos:
    gates: { tenant: { capacity: 1000000000, refill_per_s: 1000000 } }
    quota: { tokens_per_month: 1000000000000000, reservation_ttl_s: 600 }
tenants:
  ws-chaos: { plan: chaos }
EOF
  redis "$dir" "$port"
  http_port=$(free_port)
  "$control" --config "$dir/outage.yaml" --listen "127.0.0.1:$http_port" 2>"$dir/control.log" &
  control_pid=$!
  pids+=("$control_pid")
  wait_port "$http_port"
  (while kill -0 "$control_pid" 2>/dev/null; do
     echo "$(awk '/^VmRSS/ {print $2}' "/proc/$control_pid/status" 2>/dev/null || echo 0)" \
       "$(stat -c %s "$dir"/journal* 2>/dev/null | awk '{s += $1} END {print s + 0}')"
     sleep 0.5
   done) >"$dir/samples" &
  sampler=$!
  pids+=("$sampler")
  wrk -t1 -c4 -d "$((3 + outage_s + 20))s" -s "$chaos/admit_settle.lua" \
    "http://127.0.0.1:$http_port" >"$dir/wrk.out" 2>&1 &
  wrk_pid=$!
  pids+=("$wrk_pid")
  sleep 3
  kill -KILL "$redis_pid"
  wait "$redis_pid" 2>/dev/null || true
  forget "$redis_pid"
  sleep "$outage_s"
  records=$(metric "$http_port" dripgate_journal_pending)
  redis "$dir" "$port"
  t_back=$(now)
  drained "$http_port" 6000 && t_drained=$(now)
  wait "$wrk_pid" || true
  forget "$wrk_pid"
  # What the load's last seconds left pending drains too before Redis is read.
  drained "$http_port" 3000 || true
  sleep 2
  for q in $(rcli "$port" --scan --pattern 'dg:{t:ws-chaos}:q:*'); do
    quota=$((quota + $(rcli "$port" get "$q")))
  done
  stop "$sampler"
  # shellcheck disable=SC2046
  python3 "$chaos/outage_report.py" "$dir/samples" "$t_back" "$t_drained" "$quota" "$outage_s" \
    "${records:-0}" $(awk '/^CHAOS_RESULT/ {print $2, $3, $4, $5}' "$dir/wrk.out")
  stop "$control_pid"
  stop "$redis_pid"
}

# rotate: its own daemon (tenant keys, an admin token), rotate.py's clients and rotation.
rotate() {
  local dir="$work/rotate" port
  mkdir -p "$dir"
  port=$(free_port)
  redis "$dir" "$port"
  # Redis's timeout raised: this scenario is about keys, not a slow disk's fsyncs.
  sed -e 's/^  threads: 2$/  threads: 2\n  auth: tenant_keys\n  admin_token: chaos-admin/' \
    -e 's/timeout_ms: 50/timeout_ms: 500/' "$work/chaos.yaml" >"$dir/control.yaml"
  http_port=$(free_port)
  "$control" --config "$dir/control.yaml" --redis "redis://127.0.0.1:$port/0" \
    --listen "127.0.0.1:$http_port" 2>"$dir/control.log" &
  control_pid=$!
  pids+=("$control_pid")
  wait_port "$http_port"
  python3 "$chaos/rotate.py" --port "$http_port" --admin-token chaos-admin --clients 8 \
    --seconds "$seconds" --overlap-s 6
  stop "$control_pid"
  stop "$redis_pid"
}

echo "dripgate chaos: binaries from $build, load and report from $root ($(git -C "$root" log -1 --format=%h 2>/dev/null || echo '?'))"
echo "$(date -u '+%F %T UTC'), $(nproc) CPUs, $(uptime | sed 's/.*load/load/')"
for s in $only; do
  case "$s" in
    kill) load_scenario kill "Redis SIGKILL, restarted on the same port 1 s later" ;;
    stop) load_scenario stop "Redis SIGSTOP for 2 s, then SIGCONT" ;;
    stall-grpc) stall_grpc ;;
    auth) load_scenario auth "wrong Redis password for 5 s, then Redis takes it" ;;
    idle-tcp) idle_tcp ;;
    idle-unix) idle_unix ;;
    rotate) rotate ;;
    outage) outage ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
