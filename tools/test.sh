#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every test (unit tests,
# real redis-server, real DPDK on virtual devices, real BPF on veth pairs in network namespaces
# that the tests create and remove), and ends with "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."

source tools/lib.sh
bootstrap

# bpffs is needed by the probe tests; mount it when the machine has not.
mountpoint -q /sys/fs/bpf 2>/dev/null || mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true


# The unit and Redis tests again, built with ASan + UBSan in a second folder: a memory error or
# undefined behaviour fails them. (The DPDK and BPF tests stay in the plain build: DPDK's own
# memory map and the BPF loader do not run under ASan.) Skipped when a test subset was asked for.
# Unoptimized: the sanitizers' checks are compiled in at every level, and at -O2 this build was
# the run's longest part by far (admission_test.cc alone 245 s against 17 s at -O0; the whole
# set 25 min against 6 on a 2-vCPU VM), while its tests take as long either way (150 s); the
# plain build runs every test optimized.
ASAN_BUILD=${ASAN_BUILD:-build-asan}
logs=("$BUILD/meson-logs/testlog.json")
asan_tests=(common_test config_loader api_test metrics_test control_reload_test admission_test
  redis_client_test slot_test redis_cluster_test dataplane_client_test gateway_test http_test
  scheduler_test scheduler_fairness_test mailbox_test group_by_class_test classify_test
  iat_profile_test iat_pcap_test ring_model_test rls_mapping_test rls_test fallback_test
  tenant_registry_test http_request_test modes_test json_reader_test window_test io_batch_test
  admission_unit_test)
asan_targets=(common_test config_loader_test api_test metrics_test control_reload_test
  admission_test redis_client_test slot_test redis_cluster_test dataplane_client_test gateway_test
  http_test dripgate-control scheduler_test mailbox_test group_by_class_test classify_test
  iat_profile_test iat_pcap_test ring_model_test rls_mapping_test rls_test fallback_test
  tenant_registry_test http_request_test modes_test json_reader_test window_test io_batch_test
  admission_unit_test)
# The ASan build compiles while the plain build's tests run, at SCHED_IDLE: the tests are
# mostly integration tests that run one at a time and wait on real time (Redis, DPDK on
# vdevs, veth), leaving a core idle that the compiler takes; a test that wants the CPU
# preempts it at once. Not so the lab (suite lab): it compares dripgate's departures with the
# kernel's tc shapers, whose softirq batching changes on a core that is never idle (with the
# compiler beside it tbf's and htb's peaks in 100 us came out lower, and the lab's claim
# against them failed), so it runs after the build is done.
asan_build_log=$(mktemp /tmp/dripgate-asan-build.XXXXXX)
if [ $# -eq 0 ]; then
  [ -f "$ASAN_BUILD/build.ninja" ] ||
    meson setup "$ASAN_BUILD" -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
  meson configure "$ASAN_BUILD" -Doptimization=0 >/dev/null  # also a folder made before
  chrt --idle 0 meson compile -C "$ASAN_BUILD" "${asan_targets[@]}" >"$asan_build_log" 2>&1 &
  asan_build=$!
fi

set +e
if [ $# -eq 0 ]; then
  meson test -C "$BUILD" --print-errorlogs --num-processes 2 --no-suite lab
  rc=$?
  wait "$asan_build"
  asan_build_rc=$?
  meson test -C "$BUILD" --no-rebuild --print-errorlogs --suite lab --logbase lab
  lab_rc=$?
  [ $rc -ne 0 ] || rc=$lab_rc
  logs+=("$BUILD/meson-logs/lab.json")
else
  meson test -C "$BUILD" --print-errorlogs --num-processes 2 "$@"
  rc=$?
fi
set -e

if [ $# -eq 0 ]; then
  if [ "$asan_build_rc" -ne 0 ]; then
    cat "$asan_build_log" >&2
    echo "$(basename "$0"): the ASan build failed" >&2
    exit 1
  fi
  set +e
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 meson test -C "$ASAN_BUILD" --no-rebuild \
    --print-errorlogs --num-processes 2 --logbase asan "${asan_tests[@]}"
  asan_rc=$?
  set -e
  logs+=("$ASAN_BUILD/meson-logs/asan.json")
  [ $rc -ne 0 ] || rc=$asan_rc
fi

# A closing line any CI reads: counts from meson's own test log.
python3 - "${logs[@]}" <<'PY'
import json, sys
ok = bad = skip = 0
for line in (l for path in sys.argv[1:] for l in open(path)):
    r = json.loads(line)["result"]
    if r in ("OK", "EXPECTEDFAIL"): ok += 1
    elif r == "SKIP": skip += 1
    else: bad += 1
print(f"tests: {ok} passed, {bad} failed" + (f", {skip} skipped" if skip else ""))
PY
rm -f "$asan_build_log"
exit $rc
