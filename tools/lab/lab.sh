#!/usr/bin/env bash
# The appliance in a lab of network namespaces: agent fleets that burst, dripgate in between,
# an inference cluster whose NIC ring drops what comes too fast. The same offered load runs
# once per shaper and the phases are printed side by side.
#
#   tools/lab/lab.sh [--build DIR] [--load bursts|overload|highrate|fairness] [--cycles N] [--rounds N]
#                    [--shapers "direct tbf htb dripgate"] [--drip-pps N] [--out DIR]
#                    [--claim BEFORE,AFTER] [--jitter-factor X] [--target BEFORE,NAME]
#
#   dglab-agents                  dglab-gateway                               dglab-cluster
#   agents0 10.77.0.1 --veth-- to-agents [dripgate-dataplane] to-cluster --veth-- cluster0 10.77.0.2
#   mgmt0   10.78.0.1 --veth-- mgmt0 10.78.0.2  dripgate-control, redis-server
#                                host0 10.79.0.2 --veth-- dglab-host 10.79.0.1  (the host)
#
# The host reaches dripgate-control's status page over dglab-host: the run prints its address
# and the run's admin token before the first phase; it is served while a phase runs (each
# phase starts the gateway afresh).
#
# Everything in the gateway comes from config/examples/lab.yaml. Every cycle (1 s) each agent
# asks for admission over the management link, then all agents send their requests as UDP
# datagrams, each from its own socket, inside the same window; then silence. The loads:
#   bursts    (default) the window is 10 ms and the mean offered rate (~900/s) stays below the
#             cluster's: synchronized bursts that any shaper's queue absorbs, so the columns
#             differ in how evenly packets leave;
#   overload  the window is 700 ms and a runaway fleet of 32 agents that ignore 429 sends 100
#             requests each per cycle: ~5,400/s offered for 0.7 s of every second, 2.7x what
#             the cluster takes. A tc shaper's one queue then stays full: it delays and drops
#             every tenant's packets alike. dripgate queues admitted flows in their plans'
#             classes and the unadmitted excess in a small one, so the excess is what it drops;
#   highrate  one admitted tenant's 8 agents send 12,500 requests each per cycle in 700 ms,
#             ~140,000/s, and the drip (with the tc shapers, and the cluster's ring, rated in
#             the same proportion) runs at 100,000/s unless --drip-pps says otherwise: where a
#             kernel shaper's timer and softirq batching show in the jitter and the peaks;
#   fairness  a big tenant (ws-surge, 16 agents) whose plan admits its whole burst, 2,000
#             requests in 500 ms (4,000/s), shares class gold with ws-steady (8 agents, 200
#             requests in the same 500 ms, 400/s): admitted traffic, so no 429 and no class
#             keeps them apart; only the class's fairness does. Its own columns (below):
#             dripgate-alone and dripgate-fifo.
# dripgate-receiver
# models the cluster's NIC ring on the kernel's receive stamps and dripgate-iat's eBPF probe
# profiles cluster0. Shapers (one phase each, in this order, every round):
#   direct       the same dataplane with every rate unlimited: the same hops, nothing shaped;
#   tbf, htb, fq the same, plus a Linux tc shaper (tools/lib.sh tc_shaper_add) at the drip rate
#                as agents0's root qdisc: what a gateway without dripgate would use. fq is
#                replaced by htb, and the run says so, on a kernel without sch_fq; where it
#                runs, its maxrate caps each flow (each agent's socket), not the aggregate;
#   dripgate     admission + drip exactly as lab.yaml says;
#   dripgate-fifo   the same with class gold at `fairness: none` (one FIFO; a config written
#                   into --out);
#   dripgate-alone  dripgate with only the first tenant's agents (ws-steady): "as if alone".
# --load fairness runs "direct tbf htb dripgate-alone dripgate-fifo dripgate" unless --shapers
# says otherwise.
# --drip-pps N drips (and sets the tc shapers) at N packets/s instead of lab.yaml's rate: at
# 2000 the drip runs at the cluster's own rate, with no margin below it.
# Results (JSON, dripgate-iat charts) go to --out (default /tmp/dripgate-lab.<time>); the
# table is printed. Exit 1 when --claim fails (dripgate-lab-report: every column other than
# the two named and dripgate-alone, dripgate-fifo is a tc shaper the claim compares with), 2
# when not root or no namespaces.
# Removes every namespace, link and process it created, also on failure and Ctrl-C.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$root/tools/lib.sh"

bench_defaults
here="$root/tools/lab"
cycles=8
rounds=1
shapers=""
drip_override=""
out=""
claim=""
target=""
jitter_factor=""
load=bursts
usage="usage: $0 [--build DIR] [--load bursts|overload|highrate|fairness] [--cycles N] [--rounds N] [--shapers \"direct tbf htb fq dripgate dripgate-fifo dripgate-alone\"] [--drip-pps N] [--out DIR] [--claim A,B] [--jitter-factor X] [--target A,B]"
while [[ $# -gt 0 ]]; do
  [[ $1 == --build || $1 == --rounds ]] && bench_flag "$1" "${2-}" && { shift 2; continue; }
  case "$1" in
    --load) load=$2; shift 2 ;;
    --jitter-factor) jitter_factor=$2; shift 2 ;;
    --cycles) cycles=$2; shift 2 ;;
    --shapers) shapers=$2; shift 2 ;;
    --drip-pps) drip_override=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --claim) claim=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done

config="$root/config/examples/lab.yaml"
# The cluster: rated for 2000 requests/s, a 256-descriptor receive ring. The agents (name:
# agents:requests per agent and cycle:obey|ignore 429): 8 well-behaved and 16 bursty agents
# that obey 429, and runaway agents that ignore it, each request a 64-byte datagram.
rated_pps=2000
ring=256
case "$load" in
  bursts) tenants=(ws-steady:8:25:obey ws-bursty:16:25:obey ws-runaway:8:40:ignore) window=10ms ;;
  overload) tenants=(ws-steady:8:25:obey ws-bursty:16:25:obey ws-runaway:32:100:ignore) window=700ms ;;
  highrate) tenants=(ws-steady:8:12500:obey) window=700ms
    [[ -n "$drip_override" ]] || drip_override=100000 ;;
  fairness) tenants=(ws-steady:8:25:obey ws-surge:16:125:obey) window=500ms
    [[ -n "$shapers" ]] || shapers="direct tbf htb dripgate-alone dripgate-fifo dripgate" ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
shapers=${shapers:-direct tbf htb dripgate}
for s in $shapers; do
  case "$s" in
    direct | tbf* | htb | fq | dripgate | dripgate-fifo | dripgate-alone) ;;
    *) echo "lab: unknown shaper '$s'" >&2; echo "$usage" >&2; exit 2 ;;
  esac
done
payload=64
frame=$((14 + 20 + 8 + payload))
drip_pps=$(sed -n 's/^ *drip: *{ *rate_pps: *\([0-9.]*\).*/\1/p' "$config")
[[ -n "$drip_pps" ]] || { echo "lab: no drip rate_pps in $config" >&2; exit 1; }
drip_from="$config"
if [[ -n "$drip_override" ]]; then
  [[ "$drip_override" =~ ^[1-9][0-9]*$ ]] || { echo "$usage" >&2; exit 2; }
  drip_pps=$drip_override
  drip_from="--drip-pps"
  [[ "$load" != highrate ]] || drip_from="--load highrate"
fi
# At high rate the cluster is rated in the lab's proportion: the drip at 90 % of it.
[[ "$load" != highrate ]] || rated_pps=$((drip_pps * 10 / 9))
sock=$(sed -n 's/^ *control_socket: *//p' "$config")
token_file=$(sed -n 's/^ *admin_token_file: *//p' "$config")
[[ "$(dirname "$token_file")" == "$(dirname "$sock")" ]] ||
  { echo "lab: $config: control.admin_token_file must be beside the control socket" >&2; exit 1; }
ns_a=dglab-agents ns_g=dglab-gateway ns_c=dglab-cluster

need_netns_root "dripgate lab"
for b in dataplane/dripgate-dataplane control/dripgate-control tools/dripgate-iat \
    tools/lab/dripgate-agents tools/lab/dripgate-receiver tools/lab/dripgate-lab-report; do
  [[ -x "$build/$b" ]] || { echo "lab: build $build/$b first" >&2; exit 1; }
done
command -v redis-server >/dev/null || { echo "lab: redis-server missing" >&2; exit 1; }

# One lab at a time: the namespaces and the control socket have fixed names.
mkdir -p "$(dirname "$sock")"
lock="$(dirname "$sock")/lab.lock"
exec 9>"$lock"
flock -n 9 || { echo "lab: another lab is running (lock $lock)" >&2; exit 1; }

out=${out:-/tmp/dripgate-lab.$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
# dripgate-fifo's config: lab.yaml with class gold's fairness: none.
fifo_config="$out/lab-fifo.yaml"
if [[ " $shapers " == *" dripgate-fifo "* ]]; then
  sed 's/^\( *gold: *{.*\)fairness: tenant/\1fairness: none/' "$config" >"$fifo_config"
  grep -q '^ *gold: *{.*fairness: none' "$fifo_config" ||
    { echo "lab: no 'fairness: tenant' on class gold in $config" >&2; exit 1; }
fi
pids=()  # the current phase's processes, stopped in reverse order

stop_phase() {
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
  pids=()
}
# Processes still inside a lab namespace (a run killed with SIGKILL leaves them), then the
# namespaces, which take their veths and qdiscs with them.
remove_lab() {
  local n p
  for n in "$ns_a" "$ns_g" "$ns_c"; do
    [[ -e "/run/netns/$n" ]] || continue
    for p in $(ip netns pids "$n" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    ip netns del "$n" 2>/dev/null || true
  done
  # Its gateway end went with dglab-gateway, and a veth pair goes as a whole; but a run killed
  # while it was being made may leave the host's end alone.
  ip link del dglab-host 2>/dev/null || true
  rm -f "$sock" "$token_file"
}
cleanup() {
  local rc=$?
  stop_phase
  remove_lab
  # Still holding the lock: the lock file and its folder go too, so the lab leaves nothing.
  rm -f "$lock"
  rmdir "$(dirname "$sock")" 2>/dev/null || true
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Every helper runs on CPU 0; CPU 1 is the dataplane worker's (EAL pins it).
taskset -p -c 0 $$ >/dev/null 2>&1 || true
remove_lab

# fq where this kernel has it; htb in its place where it has not (tc answers "Specified qdisc
# kind is unknown" without CONFIG_NET_SCH_FQ).
if [[ " $shapers " == *" fq "* ]]; then
  ip netns add "$ns_a"
  ip -n "$ns_a" link add fqcheck type veth peer name fqcheck1
  if ! tc -n "$ns_a" qdisc add dev fqcheck root fq maxrate 1mbit 2>/dev/null; then
    shapers=$(echo " $shapers " | sed 's/ fq / htb /; s/^ //; s/ $//')
    echo "lab: this kernel has no tc fq (sch_fq): htb runs in its place"
  fi
  ip netns del "$ns_a"
fi

for n in "$ns_a" "$ns_g" "$ns_c"; do
  ip netns add "$n"
  ip netns exec "$n" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
      net.ipv6.conf.default.disable_ipv6=1
  ip -n "$n" link set lo up
done
ip -n "$ns_a" link add agents0 type veth peer name to-agents netns "$ns_g"
ip -n "$ns_g" link add to-cluster type veth peer name cluster0 netns "$ns_c"
ip -n "$ns_a" link add mgmt0 type veth peer name mgmt0 netns "$ns_g"
ip link add dglab-host type veth peer name host0 netns "$ns_g"
# Frames leave as they were built: no offload left for a later hop (the dataplane forwards
# frames as they are).
for e in "$ns_a agents0" "$ns_g to-agents" "$ns_g to-cluster" "$ns_c cluster0" \
    "$ns_a mgmt0" "$ns_g mgmt0"; do
  read -r n i <<<"$e"
  ip netns exec "$n" ethtool -K "$i" tx off tso off gso off gro off >/dev/null 2>&1 || true
  ip -n "$n" link set "$i" up
done
ip -n "$ns_g" addr add 10.79.0.2/30 dev host0
ip -n "$ns_g" link set host0 up
ip addr add 10.79.0.1/30 dev dglab-host
ip link set dglab-host up
ip -n "$ns_a" addr add 10.77.0.1/24 dev agents0
ip -n "$ns_c" addr add 10.77.0.2/24 dev cluster0
ip -n "$ns_a" addr add 10.78.0.1/24 dev mgmt0
ip -n "$ns_g" addr add 10.78.0.2/24 dev mgmt0
# No ARP in the request stream: the agents know the cluster's MAC.
cluster_mac=$(ip -n "$ns_c" -j link show dev cluster0 |
  python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["address"])')
ip -n "$ns_a" neigh replace 10.77.0.2 lladdr "$cluster_mac" dev agents0 nud permanent
# The status page's admin token (lab.yaml: control.admin_token_file): random, this run's only,
# removed with the lab.
(umask 077 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$token_file")

# wait_socket PID: until the dataplane's control socket answers (or the dataplane exits).
wait_socket() {
  for _ in $(seq 1 400); do
    [[ -S "$sock" ]] && dp_control "$sock" '{"op":"stats"}' >/dev/null 2>&1 && return 0
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# start_gateway SHAPER DIR: redis-server, dripgate-dataplane, dripgate-control from lab.yaml
# (dripgate-fifo: from $fifo_config). Anything but dripgate* runs the same dataplane with the
# port and every class unlimited.
start_gateway() {
  local shaper=$1 dir=$2 c conf=$config
  [[ "$shaper" != dripgate-fifo ]] || conf=$fifo_config
  ip netns exec "$ns_g" redis-server --port 6379 --bind 127.0.0.1 --save "" --appendonly no \
      --dir "$dir" --logfile "$dir/redis.log" &
  pids+=($!)
  local unshaped=()
  if [[ "$shaper" != dripgate* ]]; then
    unshaped=(--rate-pps 0 --rate-bps 0)
  elif [[ -n "$drip_override" ]]; then
    unshaped=(--rate-pps "$drip_pps")
  fi
  rm -f "$sock"
  # CPU 1 is the drip worker's, as an appliance isolates it, although this machine's other work
  # may run there too: a preempted worker leaves tick-long holes in the drip. So the dataplane
  # runs at nice -20, in a session of its own whose autogroup is at -20 too (with autogroups,
  # nice only ranks a process inside its session).
  ip netns exec "$ns_g" setsid bash -c 'echo -20 >/proc/self/autogroup 2>/dev/null; exec "$@"' \
      - nice -n -20 "$build/dataplane/dripgate-dataplane" --config "$conf" "${unshaped[@]}" \
      --drain-ms 0 --stats-file "$dir/dataplane.json" >"$dir/dataplane.out" \
      2>"$dir/dataplane.err" &
  pids+=($!)
  wait_socket "$!" || { tail -n 20 "$dir/dataplane.err" >&2; echo "lab: dripgate-dataplane did not start" >&2; return 1; }
  if [[ "$shaper" != dripgate* ]]; then
    for c in $(dp_control "$sock" '{"op":"stats"}' |
               python3 -c 'import json, sys; print(*json.load(sys.stdin)["stats"]["classes"])'); do
      dp_control "$sock" "{\"op\":\"set_rate\",\"class\":\"$c\",\"rate_pps\":0,\"rate_bps\":0}" \
          >/dev/null
    done
  fi
  wait_port_in "$ns_g" 127.0.0.1 6379
  ip netns exec "$ns_g" "$build/control/dripgate-control" --config "$conf" --log-level warn \
      >"$dir/control.out" 2>"$dir/control.log" &
  pids+=($!)
  wait_port_in "$ns_g" 10.78.0.2 8080
  case "$shaper" in
    direct | dripgate*) ;;
    *) tc_shaper_add "$ns_a" agents0 "$shaper" $((frame * 8 * ${drip_pps%.*})) "$frame" ;;
  esac
}

# run_phase SHAPER DIR: one run of the offered load; leaves its JSON files in DIR.
run_phase() {
  local shaper=$1 dir=$2
  mkdir -p "$dir"
  start_gateway "$shaper" "$dir"
  ip netns exec "$ns_c" "$build/tools/lab/dripgate-receiver" --listen 10.77.0.2:9000 \
      --ring "$ring" --rate "$rated_pps" --reference-pps "$drip_pps" --json "$dir/receiver.json" &
  pids+=($!)
  "$build/tools/dripgate-iat" live --iface cluster0 --netns "$ns_c" --filter-proto udp \
      --filter-port 9000 --duration $((cycles + 60))s --json "$dir/iat.json" \
      --svg "$dir/iat.svg" >"$dir/iat.txt" 2>"$dir/iat.err" &
  pids+=($!)
  for _ in $(seq 1 200); do grep -q probing "$dir/iat.err" 2>/dev/null && break; sleep 0.05; done
  local a=()
  for t in "${tenants[@]}"; do a+=(--tenant "$t"); done
  [[ "$shaper" != dripgate-alone ]] || a=(--tenant "${tenants[0]}")
  "$build/tools/lab/dripgate-agents" --netns "$ns_a" --control 10.78.0.2:8080 \
      --target 10.77.0.2:9000 --src 10.77.0.1 --size "$payload" --cycles "$cycles" \
      --window "$window" "${a[@]}" \
      --json "$dir/agents.json" --quiet &
  pids+=($!)
  wait "$!"  # in the background: a TERM to this script is handled at once, not after the run
  sleep 1.5  # the last cycle's queue drips out (at most ~0.5 s at the drip rate)
  stop_phase
  [[ "$shaper" == direct || "$shaper" == dripgate* ]] || tc -n "$ns_a" qdisc del dev agents0 root
}

echo "dripgate lab, $load load: ${#tenants[@]} tenants (${tenants[*]}),"
echo "  sending every 1 s within $window, $cycles cycles per phase; cluster rated ${rated_pps}/s with a"
echo "  ${ring}-descriptor ring; dripgate drips at ${drip_pps}/s ($drip_from)"
for s in $shapers; do
  case "$s" in
    direct) echo "  direct:   the same gateway, every rate unlimited: nothing shaped" ;;
    tbf*) n=${s#tbf}
      printf '  %-9s tc tbf at %s frames/s, burst %s frame(s), on the agents'"'"' link\n' "$s:" "$drip_pps" "${n:-1}" ;;
    htb) echo "  htb:      tc htb, one class at ${drip_pps} frames/s (rate = ceil, burst one frame)" ;;
    fq) echo "  fq:       tc fq maxrate ${drip_pps} frames/s, which caps each flow (one per agent), not the aggregate" ;;
    dripgate) echo "  dripgate: the drip at ${drip_pps}/s; unadmitted flows in a small class that drops their excess" ;;
    dripgate-fifo) echo "  dripgate-fifo: dripgate with class gold at fairness: none (one FIFO): $fifo_config" ;;
    dripgate-alone) echo "  dripgate-alone: dripgate with only ${tenants[0]%%:*}'s agents: the steady tenant as if alone" ;;
  esac
done
echo "  (every phase runs dripgate-control: agents that obey 429 hold back in each; only dripgate"
echo "  drops what was not admitted)"
# The token is a throwaway of this run (a new one each run, gone with the lab): printing it is
# what lets the user at the box open the page.
echo "status page (while a phase runs; each phase restarts the gateway): http://10.79.0.2:8080/ui" \
  " — user: any, password: $(cat "$token_file")"
phases=()
for r in $(seq 1 "$rounds"); do
  for s in $shapers; do
    dir="$out/$s"
    [[ "$rounds" == 1 ]] || dir="$out/$s.$r"
    printf '  round %s/%s: %-9s ...' "$r" "$rounds" "$s"
    run_phase "$s" "$dir"
    python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))
print(" %d arrived, %d dropped by the NIC ring" % (r["received"], r["ring_dropped"]))' \
        "$dir/receiver.json"
    phases+=(--phase "$s=$dir")
  done
done
echo

first=${shapers%% *}
last=${shapers##* }
report=("$build/tools/lab/dripgate-lab-report" --load "$load" "${phases[@]}")
[[ -z "$claim" ]] || report+=(--claim "$claim")
[[ -z "$target" ]] || report+=(--target "$target")
[[ -z "$jitter_factor" ]] || report+=(--jitter-factor "$jitter_factor")
r1=""
[[ "$rounds" == 1 ]] || r1=.1  # with rounds, the first round's
if [[ "$last" != "$first" ]]; then
  report+=(--svg-pair "$out/compare.svg")
  "$build/tools/dripgate-iat" compare "$out/$first$r1/iat.json" "$out/$last$r1/iat.json" \
      >"$out/compare.txt" 2>&1 || true
fi
set +e
"${report[@]}" | tee "$out/table.txt"
rc=${PIPESTATUS[0]}
set -e
echo
echo "output: $out (table.txt; per phase: receiver.json agents.json dataplane.json iat.json iat.svg;"
echo "        compare.svg, compare.txt: dripgate-iat's profiles of the first and last phase side by side,"
echo "        of the first round)"
exit "$rc"
