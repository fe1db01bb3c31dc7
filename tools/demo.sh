#!/usr/bin/env bash
# The README's demo command.
#
#   bash tools/demo.sh            the appliance end to end in a lab of network namespaces
#                                 (tools/lab/lab.sh): bursting agents, admission, the drip, a
#                                 cluster NIC (modelled) that drops what comes too fast; the same
#                                 load unshaped, through tc tbf and htb, and through dripgate,
#                                 side by side, and the claim against direct and the best tc
#                                 column; the bursts load, the overload, the high rate, and a
#                                 burst admitted into a steady tenant's class (fairness). Needs
#                                 root.
#                                 Extra arguments go to one lab.sh run instead.
#   bash tools/demo.sh admission  the rate-limit walkthrough: a private redis-server on a free
#                                 port, dripgate-control on config/examples/walkthrough.yaml, and
#                                 the walkthrough's runs (token bucket, token quota, three gates)
#                                 replayed through the HTTP API; prints where the daemon's
#                                 status page is (GET /ui) and this run's admin token for it.
# Everything it starts is stopped on exit, also on failure or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=lab
if [[ $# -gt 0 && "$1" != -* ]]; then mode=$1; shift; fi
case "$mode" in
  lab | admission) ;;
  *) echo "usage: $0 [admission] | $0 [lab.sh options]" >&2; exit 2 ;;
esac
source tools/lib.sh
[[ "$mode" == admission ]] || need_netns_root "dripgate demo"

targets=(dripgate-control dripgate-demo)
[[ "$mode" == admission ]] || targets=(dripgate-control dripgate-dataplane dripgate-iat
                                      dripgate-agents dripgate-receiver dripgate-lab-report)
bootstrap "${targets[@]}"

if [[ "$mode" == lab ]]; then
  mountpoint -q /sys/fs/bpf 2>/dev/null || mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
  [[ $# -eq 0 ]] || exec bash tools/lab/lab.sh --build "$BUILD" --claim direct,dripgate "$@"
  # The bursts load in three rounds: the table and the claim take medians (one round's jitter
  # p99 on a shared machine can be off by a factor of several). Then the overload and the high
  # rate, once each: their claimed rows differ by factors no run-to-run noise reaches. Then the
  # fairness load, three cycles with one tc column (tbf and htb queue it alike, as one FIFO).
  # A load whose claim fails does not stop the others: every table is shown, and the exit
  # status is 1 when any claim failed.
  rc=0
  lab() {
    local s=0
    bash tools/lab/lab.sh --build "$BUILD" --claim direct,dripgate "$@" || s=$?
    ((s < 128)) || exit "$s"  # interrupted: stop here
    ((s == 0)) || rc=1
  }
  lab --rounds 3
  echo
  lab --load overload
  echo
  lab --load highrate --cycles 4
  echo
  lab --load fairness --cycles 3 --shapers "direct tbf dripgate-alone dripgate-fifo dripgate"
  exit $rc
fi

work=$(mktemp -d /tmp/dripgate-demo.XXXXXX)
pids=()
cleanup() {
  local rc=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ $rc -ne 0 ] && [ -f "$work/control.log" ]; then
    echo "--- dripgate-control log ---" >&2
    tail -n 30 "$work/control.log" >&2
  fi
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_redis "$work"

# The walkthrough's file with an admin token of this run's, which opens the status page.
config=config/examples/walkthrough.yaml
admin_token=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
{ cat "$config"; printf 'control:\n  admin_token: "%s"\n' "$admin_token"; } >"$work/demo.yaml"
http_port=$(free_port)
"$BUILD/control/dripgate-control" --config "$work/demo.yaml" \
  --redis "redis://127.0.0.1:$redis_port/0" --listen "127.0.0.1:$http_port" --log-level warn \
  2>"$work/control.log" &
pids+=($!)
wait_port "$http_port"

echo "dripgate demo: redis-server on port $redis_port, dripgate-control on 127.0.0.1:$http_port"
echo "(config: dripgate-control --config $config, with control.admin_token set for this run)"
echo "status page: http://127.0.0.1:$http_port/ui (any user name; password: the admin token" \
  "$admin_token)"
echo
"$BUILD/tools/dripgate-demo" --port "$http_port"
