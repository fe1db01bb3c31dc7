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
