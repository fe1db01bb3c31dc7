#!/usr/bin/env bash
# What tagging costs admission: two dripgate-control daemons on the same Redis and the same plan
# (admit_bench.yaml), one attached to a running dripgate-dataplane (every admitted request's flow
# is tagged over the control socket before the answer), one without a dataplane; wrk sends
# POST /v1/admit with a new flow per request (admit_bench.lua, DG_FLOWS=1) to each in alternating rounds.
# Prints decisions/s of both, medians and every round's ratio, how many flows the dataplane
# holds at the end, and the CPU time the dataplane's main lcore (the control socket, the flow
# table's writer) spent per tag in the windows with it (/proc/<pid>/task/<pid>/schedstat) and
# the tags it served per wakeup (voluntary context switches, /proc/<pid>/task/<pid>/status), and
# each daemon's CPU per decision (all its threads' schedstat over its windows).
# Target: tagging costs at most 10 % of the decisions/s.
#
#   tools/bench/admit_tagging.sh [--build DIR] [--seconds N] [--rounds N] [--conns N]
set -euo pipefail

source "$(dirname "$0")/../lib.sh"
bench_defaults
conns=32
bench_parse "[--build DIR] [--seconds N] [--rounds N] [--conns N]" conns -- "$@"
need_dataplane "$build"
cd "$root"
BUILD=$build bootstrap dripgate-control
bench_workdir admit_tagging

start_redis "$tmp"
prefix="dgat$$"
DP_FLOW_TABLE_SIZE=1048576 dp_bench_yaml "$tmp/dp.yaml" "$prefix" net_null0 "net_null1,no-rx=1" \
    "$tmp/dp.sock" one-way
"$build/dataplane/dripgate-dataplane" --config "$tmp/dp.yaml" --shape-non-ip default \
    >"$tmp/dp.out" 2>"$tmp/dp.err" &
dp_pid=$!
pids+=($dp_pid)
for i in $(seq 100); do [[ -S $tmp/dp.sock ]] && break; sleep 0.1; done
[[ -S $tmp/dp.sock ]] || { echo "dripgate-dataplane did not start:" >&2; cat "$tmp/dp.err" >&2; exit 1; }

# daemon VAR SOCKET: starts a daemon whose dataplane socket is SOCKET; VAR = its HTTP port. (Not
# in a $(...): the daemon must be a child of this shell, stopped by its cleanup.)
daemon() {
  local port yaml
  port=$(free_port)
  yaml="$tmp/control.$port.yaml"
  sed "s|dataplane_socket: .*|dataplane_socket: $2|" "$here/admit_bench.yaml" >"$yaml"
  "$build/control/dripgate-control" --config "$yaml" --redis "redis://127.0.0.1:$redis_port/0" \
    --listen "127.0.0.1:$port" --threads 1 --log-level warn 2>"$tmp/control.$port.log" &
  pids+=($!)
  printf -v "$1_pid" '%s' "$!"
  wait_port "$port"
  printf -v "$1" '%s' "$port"
}
daemon with "$tmp/dp.sock"
daemon without /nonexistent/dripgate-bench.sock

tags_ok() {
  curl -s "http://127.0.0.1:$with/metrics" | awk '/^dripgate_dataplane_tag_total\{result="ok"\}/ { print $2 }'
}
main_cpu_ns() { awk '{ print $1 }' "/proc/$dp_pid/task/$dp_pid/schedstat"; }
# A process's on-CPU ns so far, all its threads.
process_cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{ s += $1 } END { printf "%.0f\n", s }'; }
# Times the main lcore slept and was woken (by the control socket, its 100 ms poll timeout, a
# signal): each costs a context switch each way.
main_wakeups() { awk '/^voluntary_ctxt_switches/ { print $2 }' "/proc/$dp_pid/task/$dp_pid/status"; }
# The main lcore's CPU ns, the tags answered ok and the main lcore's wakeups in the windows with
# a dataplane.
with_run() {
  local c0 t0 v0 w
  c0=$(main_cpu_ns)
  t0=$(tags_ok)
  v0=$(main_wakeups)
  w=$(run "$with" "$with_pid")
  echo "$(($(main_cpu_ns) - c0)) $(printf '%.0f' "$(tags_ok)") ${t0:-0} $(($(main_wakeups) - v0))" \
    >>"$tmp/main_cpu"
  echo "$w"
}
run() {  # $1 = port, $2 = its daemon's pid: decisions/s over one window
  local c0 r
  c0=$(process_cpu_ns "$2")
  r=$(run_wrk "$1")
  echo "$r $(($(process_cpu_ns "$2") - c0))" >>"$tmp/daemon_cpu.$1"
  echo "$r"
}
run_wrk() {
  DG_FLOWS=1 wrk -t2 "-c$conns" "-d${seconds}s" -s "$here/admit_bench.lua" "http://127.0.0.1:$1/v1/admit" |
    awk '/^WRK_RESULT/ { if ($6 != 0) { print "wrk: " $6 " errors" > "/dev/stderr"; exit 1 } print $2 }'
}
# The order flips every round: a window's load can favour whichever side runs first.
for round in $(seq "$rounds"); do
  if ((round % 2)); then
    w=$(with_run)
    wo=$(run "$without" "$without_pid")
  else
    wo=$(run "$without" "$without_pid")
    w=$(with_run)
  fi
  echo "round $round: with a dataplane $w/s, without $wo/s" >&2
  echo "$w $wo" >>"$tmp/rounds"
done
flows=$(dp_control "$tmp/dp.sock" '{"op":"stats"}' |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["stats"]["flows"])')
tagged=$(curl -s "http://127.0.0.1:$with/metrics" | awk '/^dripgate_dataplane_tag_total\{result="ok"\}/ { print $2 }')

python3 - "$tmp/rounds" "$flows" "${tagged:-0}" "$(uptime)" "$tmp/main_cpu" "$with" "$without" "$tmp/daemon_cpu." \
    "$seconds" <<'EOF'
import statistics, sys
seconds = float(sys.argv[9])
rounds = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
flows, tagged, up = sys.argv[2], sys.argv[3], sys.argv[4].strip()
w = statistics.median(r[0] for r in rounds)
wo = statistics.median(r[1] for r in rounds)
ratios = [r[0] / r[1] for r in rounds]
print(f"\nAdmission with and without flow tagging, {len(rounds)} rounds, medians ({up})")
print("| with a dataplane /s | without /s | ratio (median of rounds) | rounds")
print(f"| {w:>19.0f} | {wo:>10.0f} | {statistics.median(ratios):>24.2f} | " +
      " ".join(f"{x:.2f}" for x in ratios))
print(f"tags answered ok: {tagged}; flows in the dataplane's table at the end: {flows}")
cpu = [tuple(map(float, l.split())) for l in open(sys.argv[5]) if l.strip()]
per_tag = [c / (t1 - t0) for c, t1, t0, _ in cpu if t1 > t0]
if per_tag:
    print(f"dataplane main lcore CPU per tag: {statistics.median(per_tag):.0f} ns (rounds: " +
          " ".join(f"{x:.0f}" for x in per_tag) + ")")
wake = [(t1 - t0) / v for _, t1, t0, v in cpu if t1 > t0 and v > 0]
if wake:
    print(f"tags per wakeup of the dataplane main lcore: {statistics.median(wake):.1f} (rounds: " +
          " ".join(f"{x:.1f}" for x in wake) + ")")
for name, port in (("with a dataplane", sys.argv[6]), ("without", sys.argv[7])):
    d = [tuple(map(float, l.split())) for l in open(sys.argv[8] + port) if l.strip()]
    us = [c / 1e3 / (r * seconds) for r, c in d if r > 0]
    print(f"daemon CPU per decision, {name}: {statistics.median(us):.1f} us (rounds: " +
          " ".join(f"{x:.1f}" for x in us) + ")")
print("target: ratio >= 0.90 (tagging costs at most 10 % of the decisions/s)")
EOF
