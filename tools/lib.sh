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

# start_redis DIR: a private, non-persistent redis-server on a free port; sets redis_port.
start_redis() {
  redis_port=$(free_port)
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$1" --logfile "$1/redis.log" &
  pids+=($!)
  wait_port "$redis_port"
}

# bootstrap [TARGET...]: what every entry point does first, from the repo root: installs the
# missing Debian packages, configures $BUILD (default build/) once, and compiles the targets
# (everything when none are named). A failed build prints the compiler's output and exits 1.
bootstrap() {
  bash tools/setup-deps.sh
  BUILD=${BUILD:-build}
  [ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" >/dev/null
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

# need_dataplane DIR: exits 1 unless DIR (a build directory) holds dripgate-dataplane.
need_dataplane() {
  [[ -x "$1/dataplane/dripgate-dataplane" ]] ||
    { echo "build $1/dataplane/dripgate-dataplane first (meson compile -C $1 dripgate-dataplane)" >&2; exit 1; }
}
