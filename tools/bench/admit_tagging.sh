#!/usr/bin/env bash
# What tagging costs admission: dripgate-control daemons on the same Redis and the same plan
# (admit_bench.yaml), one attached to a running dripgate-dataplane (every admitted request's flow
# is tagged over the control socket before the answer), one without a dataplane; wrk sends
# POST /v1/admit with a new flow per request (admit_bench.lua, DG_FLOWS=1) to each in turn.
# Prints decisions/s of each, medians and every round's ratio to the daemon without, how many
# flows the dataplane holds at the end, the CPU time the dataplane's main lcore (the control
# socket, the flow table's writer) spent per tag (/proc/<pid>/task/<pid>/schedstat) and the tags
# it served per wakeup (voluntary context switches, /proc/<pid>/task/<pid>/status), and each
# daemon's CPU per decision (all its threads' schedstat over its windows).
# Target: tagging costs at most 10 % of the decisions/s.
#
#   tools/bench/admit_tagging.sh [--build DIR] [--baseline DIR] [--seconds N (4)] [--rounds N (20)]
#                                [--conns N (32)]
#
# --baseline DIR: a second dataplane, DIR's dripgate-dataplane (an older build), with a third
# daemon attached to it, measured in the same rounds. Only the dataplane of the window being
# measured runs; the other is stopped (SIGSTOP), so each window has one spinning worker lcore,
# as without a baseline. The daemons are all $build's. The order of the windows turns every
# round: a window's load can favour whichever side runs first.
set -euo pipefail

source "$(dirname "$0")/../lib.sh"
bench_defaults
# 20 rounds of 4 s by default: one round's ratio moves by up to ±0.2 on a shared 2-vCPU VM (the
# box's speed changes under it), so a median of 3 says little; the median of 20 came out the same
# (0.91) in two runs 40 minutes apart.
rounds=20
seconds=4
conns=32
bench_parse "[--build DIR] [--baseline DIR] [--seconds N] [--rounds N] [--conns N]" conns -- "$@"
need_dataplane "$build"
[[ -z "$baseline" ]] || need_dataplane "$baseline"
cd "$root"
BUILD=$build bootstrap dripgate-control
bench_workdir admit_tagging

start_redis "$tmp"

# dataplane NAME BUILD: starts BUILD's dripgate-dataplane on its own socket $tmp/NAME.sock;
# NAME_dp = its pid.
dataplane() {
  local sock="$tmp/$1.sock"
  DP_FLOW_TABLE_SIZE=1048576 dp_bench_yaml "$tmp/$1.yaml" "dgat$$$1" net_null0 \
      "net_null1,no-rx=1" "$sock" one-way
  "$2/dataplane/dripgate-dataplane" --config "$tmp/$1.yaml" --shape-non-ip default \
      >"$tmp/$1.out" 2>"$tmp/$1.err" &
  pids+=($!)
  printf -v "$1_dp" '%s' "$!"
  for i in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
  [[ -S $sock ]] || { echo "dripgate-dataplane did not start:" >&2; cat "$tmp/$1.err" >&2; exit 1; }
}
# daemon NAME SOCKET: starts a daemon whose dataplane socket is SOCKET; NAME_port = its HTTP
# port, NAME_pid = its pid. (Not in a $(...): the daemon must be a child of this shell, stopped by
# its cleanup.)
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
  printf -v "$1_port" '%s' "$port"
}

sides=(new without)
dataplane new "$build"
daemon new "$tmp/new.sock"
daemon without /nonexistent/dripgate-bench.sock
if [[ -n "$baseline" ]]; then
  sides=(new base without)
  dataplane base "$baseline"
  daemon base "$tmp/base.sock"
  kill -STOP "$base_dp"
fi

tags_ok() {  # $1 = a daemon's port
  curl -s "http://127.0.0.1:$1/metrics" |
    awk '/^dripgate_dataplane_tag_total\{result="ok"\}/ { printf "%.0f\n", $2; f = 1 } END { if (!f) print 0 }'
}
# A thread's, or all of a process's threads', on-CPU ns so far.
thread_cpu_ns() { awk '{ print $1 }' "/proc/$1/task/$1/schedstat"; }
process_cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{ s += $1 } END { printf "%.0f\n", s }'; }
# Times a thread slept and was woken (by the control socket, its 100 ms poll timeout, a signal):
# each costs a context switch each way.
wakeups() { awk '/^voluntary_ctxt_switches/ { print $2 }' "/proc/$1/task/$1/status"; }
# window SIDE: one wrk window against SIDE's daemon, with SIDE's dataplane (or the new one, for
# the daemon without) the only one running. Appends to $tmp/windows: side, decisions/s, the
# daemon's CPU ns, and for a side with a dataplane its main lcore's CPU ns, the tags answered ok
# and the main lcore's wakeups.
window() {
  local side=$1 dp port pid c0 d0 t0 v0 r
  dp=${new_dp}
  [[ $side != base ]] || dp=$base_dp
  if [[ -n "$baseline" ]]; then
    if [[ $dp == "$base_dp" ]]; then kill -STOP "$new_dp"; else kill -STOP "$base_dp"; fi
    kill -CONT "$dp"
    sleep 0.5
  fi
  port=${side}_port pid=${side}_pid
  port=${!port} pid=${!pid}
  c0=$(thread_cpu_ns "$dp") d0=$(process_cpu_ns "$pid") t0=$(tags_ok "$port") v0=$(wakeups "$dp")
  r=$(DG_FLOWS=1 wrk -t2 "-c$conns" "-d${seconds}s" -s "$here/admit_bench.lua" \
        "http://127.0.0.1:$port/v1/admit" |
      awk '/^WRK_RESULT/ { if ($6 != 0) { print "wrk: " $6 " errors" > "/dev/stderr"; exit 1 } print $2 }')
  echo "$side $r $(($(process_cpu_ns "$pid") - d0)) $(($(thread_cpu_ns "$dp") - c0))" \
       "$(($(tags_ok "$port") - t0)) $(($(wakeups "$dp") - v0))" >>"$tmp/windows"
  echo "round $round: $side $r decisions/s" >&2
}
for round in $(seq "$rounds"); do
  n=${#sides[@]}
  for k in $(seq 0 $((n - 1))); do window "${sides[$(((round + k) % n))]}"; done
done
[[ -z "$baseline" ]] || kill -CONT "$new_dp" "$base_dp"
flows=$(dp_control "$tmp/new.sock" '{"op":"stats"}' |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["stats"]["flows"])')

python3 - "$tmp/windows" "$flows" "$(uptime)" "$seconds" "$rounds" <<'EOF'
import statistics, sys
path, flows, up, seconds, rounds = sys.argv[1], sys.argv[2], sys.argv[3].strip(), \
    float(sys.argv[4]), int(sys.argv[5])
by = {}
for line in open(path):
    f = line.split()
    if f:
        by.setdefault(f[0], []).append(tuple(map(float, f[1:])))
names = {"new": "with a dataplane", "base": "with the baseline dataplane", "without": "without"}
sides = [s for s in ("new", "base", "without") if s in by]
med = statistics.median
print(f"\nAdmission with and without flow tagging, {rounds} rounds, medians ({up})")
print("| daemon | decisions/s | ratio to without (median of rounds) | rounds "
      "| dataplane main lcore ns per tag | tags per wakeup | daemon CPU us per decision")
for s in sides:
    w = by[s]
    rate = med(r[0] for r in w)
    ratios = [a[0] / b[0] for a, b in zip(w, by["without"])]
    daemon = [r[1] / 1e3 / (r[0] * seconds) for r in w if r[0] > 0]
    per_tag = [r[2] / r[3] for r in w if len(r) > 3 and r[3] > 0]
    per_wake = [r[3] / r[4] for r in w if len(r) > 4 and r[3] > 0 and r[4] > 0]
    cells = [names[s], f"{rate:.0f}", f"{med(ratios):.2f}", " ".join(f"{x:.2f}" for x in ratios),
             f"{med(per_tag):.0f} (" + " ".join(f"{x:.0f}" for x in per_tag) + ")" if per_tag else "-",
             f"{med(per_wake):.1f}" if per_wake else "-",
             f"{med(daemon):.1f} (" + " ".join(f"{x:.1f}" for x in daemon) + ")"]
    print("| " + " | ".join(cells))
print(f"flows in the dataplane's table at the end: {flows}")
print("target: ratio >= 0.90 (tagging costs at most 10 % of the decisions/s)")
EOF
