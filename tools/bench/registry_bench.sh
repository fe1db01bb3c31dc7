#!/usr/bin/env bash
# The tenant registry at scale: starts a private redis-server and runs registry_load against it
# (tools/bench/registry_load.cc says what it prints). Not a test: figures only.
#
#   bash tools/bench/registry_bench.sh [--build DIR] [--tenants N]
set -euo pipefail

source "$(dirname "$0")/../lib.sh"
bench_defaults
tenants=100000
while [[ $# -gt 0 ]]; do
  bench_flag "$1" "${2-}" && { shift 2; continue; }
  case $1 in
    --tenants) tenants=$2 ;;
    *) echo "usage: $0 [--build DIR] [--tenants N]" >&2; exit 2 ;;
  esac
  shift 2
done

pids=()
work=$(mktemp -d /tmp/dripgate-registry-bench-XXXXXX)
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$work"' EXIT
start_redis "$work"
"$build/tools/bench/registry_load" --redis "redis://127.0.0.1:$redis_port/0" --tenants "$tenants"
