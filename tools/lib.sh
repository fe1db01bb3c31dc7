# Shell helpers shared by the demo and the benchmarks (sourced, not run).
# Callers keep started pids in the array `pids` and stop them in their EXIT trap.

# A TCP port on 127.0.0.1 that was free a moment ago.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits until a TCP port on 127.0.0.1 accepts connections (bash's /dev/tcp, no curl needed).
wait_port() {
  for _ in $(seq 1 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "$(basename "$0"): nothing listens on port $1" >&2
  return 1
}

# A free port for a Redis Cluster node: it also listens on port + 10000 (the cluster bus), so the
# port must be at most 55535 and both must be free.
free_cluster_port() {
  python3 -c 'import random, socket
while True:
    p = random.randint(20000, 55535)
    try:
        for q in (p, p + 10000):
            socket.socket().bind(("127.0.0.1", q))
        print(p)
        break
    except OSError:
        pass'
}

# start_redis DIR [OPTION...]: a private, non-persistent redis-server on a free port (or on
# next_redis_port, once, when set), with the redis-server options given; sets redis_port.
start_redis() {
  redis_port=${next_redis_port:-$(free_port)}
  next_redis_port=
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$1" --logfile "$1/redis.log" "${@:2}" &
  pids+=($!)
  wait_port "$redis_port" || { tail -3 "$1/redis.log" >&2; return 1; }
}

# start_redis_cluster DIR N: N private, non-persistent cluster-enabled redis-servers on free ports
# joined into one cluster of N masters (`redis-cli --cluster create`, no replicas), nodes that keep
# serving their slots when another fails; sets cluster_ports (an array) and appends the pids.
start_redis_cluster() {
  cluster_ports=()
  local i seeds=()
  for ((i = 0; i < $2; i++)); do
    mkdir -p "$1/node$i"
    next_redis_port=$(free_cluster_port)
    start_redis "$1/node$i" --cluster-enabled yes --cluster-config-file "$1/node$i/nodes.conf" \
      --cluster-require-full-coverage no
    cluster_ports+=("$redis_port")
    seeds+=("127.0.0.1:$redis_port")
  done
  redis-cli --cluster create "${seeds[@]}" --cluster-replicas 0 --cluster-yes >"$1/create.log" 2>&1 ||
    { cat "$1/create.log" >&2; return 1; }
  for _ in $(seq 1 100); do
    redis-cli -p "${cluster_ports[0]}" cluster info | grep -q '^cluster_state:ok' && return 0
    sleep 0.05
  done
  echo "$(basename "$0"): the cluster did not reach cluster_state:ok" >&2
  return 1
}

# bootstrap [TARGET...]: what every entry point does first, from the repo root: installs the
# missing Debian packages, configures $BUILD (default build/) once, and compiles the targets
# (everything when none are named). A failed build prints the compiler's output and exits 1.
# The folder is set up with the Debian package's paths (/usr, /etc, /var), so that it can be
# packaged as built (debian/rules' DRIPGATE_PREBUILT, tests/integration/deb_test.sh); no test
# depends on the prefix.
bootstrap() {
  bash tools/setup-deps.sh
  BUILD=${BUILD:-build}
  [ -f "$BUILD/build.ninja" ] ||
    meson setup "$BUILD" --prefix=/usr --sysconfdir=/etc --localstatedir=/var >/dev/null
  local out
  if ! out=$(meson compile -C "$BUILD" "$@" 2>&1); then
    echo "$out" >&2
    echo "$(basename "$0"): build failed" >&2
    exit 1
  fi
}

# The benchmarks' shared defaults, before their flags: root (the repo), here (tools/bench),
# build (root/build), no baseline, 10 s windows, 3 rounds.
bench_defaults() {
  root=$(cd "$(dirname "$0")/../.." && pwd)
  here="$root/tools/bench"
  build="$root/build"
  baseline=""
  seconds=10
  rounds=3
}

# The benchmarks' shared flags: `bench_flag "$1" "${2-}" && { shift 2; continue; }` in their
# argument loop sets build (--build DIR), baseline (--baseline DIR: an older build measured in
# the same run), seconds (--seconds N) or rounds (--rounds N); false for any other flag.
bench_flag() {
  case "$1" in
    --build) build=$2 ;;
    --baseline) baseline=$2 ;;
    --seconds) seconds=$2 ;;
    --rounds) rounds=$2 ;;
    *) return 1 ;;
  esac
  [[ -n "$2" ]] || { echo "$(basename "$0"): $1 needs a value" >&2; exit 2; }
}

# bench_workdir NAME: tmp (a new directory /tmp/NAME.*), pids (the processes to stop, appended to
# by the caller) and an EXIT trap that stops them and removes tmp.
bench_workdir() {
  tmp=$(mktemp -d "/tmp/$1.XXXXXX")
  pids=()
  trap bench_cleanup EXIT
}
bench_cleanup() {
  # CONT after TERM: a process a benchmark stopped (SIGSTOP) acts on the TERM once it runs.
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && kill -CONT "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}

# bench_parse "USAGE" NAME... -- "$@": the benchmarks' shared flags (bench_flag) and, for each NAME,
# --NAME VALUE setting the variable NAME; anything else prints "usage: SCRIPT USAGE" and exits 2.
bench_parse() {
  local usage=$1 names=() n matched
  shift
  while [[ $1 != -- ]]; do names+=("$1"); shift; done
  shift
  while [[ $# -gt 0 ]]; do
    bench_flag "$1" "${2-}" && { shift 2; continue; }
    matched=0
    for n in "${names[@]}"; do
      [[ $1 == "--$n" ]] || continue
      [[ -n ${2-} ]] || { echo "$(basename "$0"): $1 needs a value" >&2; exit 2; }
      printf -v "$n" '%s' "$2"
      matched=1
      shift 2
      break
    done
    ((matched)) || { echo "usage: $0 $usage" >&2; exit 2; }
  done
}

# need_dataplane DIR: exits 1 unless DIR (a build directory) holds dripgate-dataplane.
need_dataplane() {
  [[ -x "$1/dataplane/dripgate-dataplane" ]] ||
    { echo "build $1/dataplane/dripgate-dataplane first (meson compile -C $1 dripgate-dataplane)" >&2; exit 1; }
}

# dp_bench_yaml FILE PREFIX VDEV0 VDEV1 SOCKET SCENARIO: the benchmarks' dataplane config on lcores
# 0-1 (one worker), ports 0 (client) and 1 (cluster), unlimited rates. SCENARIO ip-flows: classes
# gold (weight 4) and default, a CIDR rule 10.1.0.0/16 -> gold; anything else: default only.
# DP_CLASSES, when set, is the classes block instead (with its classify rules). DP_LCORES and
# DP_EAL_LCORES, when set, replace `lcores: { rx: 1, drip: 1 }` and the EAL's `"-l", "0-1"`.
dp_bench_yaml() {
  local classes lcores=${DP_LCORES-} eal_lcores=${DP_EAL_LCORES-}
  [[ -n $lcores ]] || lcores='{ rx: 1, drip: 1 }'
  [[ -n $eal_lcores ]] || eal_lcores='"-l", "0-1"'
  if [[ -n ${DP_CLASSES-} ]]; then
    classes=$DP_CLASSES
  elif [[ $6 == ip-flows ]]; then
    classes='    gold: { weight: 4, rate_pps: 0, queue_depth: 4096, ttl_ms: 1000 }
    default: { weight: 1, rate_pps: 0, queue_depth: 4096, ttl_ms: 1000 }
  classify:
    - { src: "10.1.0.0/16", class: gold }'
  else
    classes='    default: { weight: 1, rate_pps: 0, queue_depth: 4096, ttl_ms: 1000 }'
  fi
  cat >"$1" <<EOF
dataplane:
  eal: [$eal_lcores, "--no-huge", "--no-shconf", "-m", "512", "--no-pci", "--file-prefix=$2",
        "--vdev=$3", "--vdev=$4"]
  ports: { client: 0, cluster: 1 }
  lcores: $lcores
  mbufs: 16383
  flow_table_size: ${DP_FLOW_TABLE_SIZE:-65536}
  drip: { rate_pps: 0, rate_bps: 0, batch: 32, max_catchup: 8 }
  classes:
$classes
  unknown_flows: default
  control_socket: $5
EOF
}

# tc_shaper_add NS DEV SHAPER BITS_PER_S FRAME_BYTES: a Linux tc shaper as DEV's root qdisc in
# namespace NS, sized in frames of FRAME_BYTES so it can be set beside a packet pacer:
#   tbf    burst = one frame: tokens for one packet at most, every departure waits for its timer;
#   tbfN   burst = N frames, up to N frames back to back after a late timer;
#   htb    one class, rate = ceil, burst = cburst = quantum = one frame, a 1000-packet pfifo;
#   fq     maxrate, quantum = initial_quantum = one frame, timer_slack 0.
# Queues hold 1000 frames. Fails (tc's message on stderr) when the kernel lacks the qdisc.
tc_shaper_add() {
  local ns=$1 dev=$2 shaper=$3 bits=$4 frame=$5
  case "$shaper" in
    tbf*)
      local n=${shaper#tbf}
      tc -n "$ns" qdisc add dev "$dev" root tbf rate "${bits}bit" burst $((frame * ${n:-1})) \
          limit $((frame * 1000))
      ;;
    htb)
      tc -n "$ns" qdisc add dev "$dev" root handle 1: htb default 1 &&
      tc -n "$ns" class add dev "$dev" parent 1: classid 1:1 htb rate "${bits}bit" \
          ceil "${bits}bit" burst "$frame" cburst "$frame" quantum "$frame" &&
      tc -n "$ns" qdisc add dev "$dev" parent 1:1 handle 2: pfifo limit 1000
      ;;
    fq)
      tc -n "$ns" qdisc add dev "$dev" root fq maxrate "${bits}bit" quantum "$frame" \
          initial_quantum "$frame" timer_slack 0 flow_limit 1000
      ;;
    *) echo "tc_shaper_add: unknown shaper '$shaper' (tbf, tbfN, htb, fq)" >&2; return 1 ;;
  esac
}

# wait_port_in NS HOST PORT: waits until HOST:PORT accepts TCP connections inside namespace NS.
wait_port_in() {
  for _ in $(seq 1 200); do
    if ip netns exec "$1" bash -c "exec 3<>/dev/tcp/$2/$3" 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "$(basename "$0"): nothing listens on $2:$3 in namespace $1" >&2
  return 1
}

# dp_control SOCKET JSON: one request on dripgate-dataplane's control socket; prints the answer.
dp_control() {
  python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
print(s.makefile().readline().strip())' "$1" "$2"
}

# need_netns_root WHO: exits 2 with one line saying what is missing unless this runs as root on
# a kernel that lets it create network namespaces.
need_netns_root() {
  if [[ "$(id -u)" != 0 ]]; then
    echo "$1: needs root (it creates network namespaces and veth pairs and loads an eBPF probe): sudo bash $0" >&2
    exit 2
  fi
  if ! { ip netns add "dgcheck-$$" && ip netns del "dgcheck-$$"; } 2>/dev/null; then
    echo "$1: needs network namespaces (\`ip netns add\` failed: iproute2 missing, or a container without CAP_SYS_ADMIN)" >&2
    exit 2
  fi
}
