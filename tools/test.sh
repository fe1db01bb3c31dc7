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

set +e
meson test -C "$BUILD" --print-errorlogs --num-processes 2 "$@"
rc=$?
set -e

# A closing line any CI reads: counts from meson's own test log.
python3 - "$BUILD/meson-logs/testlog.json" <<'PY'
import json, sys
ok = bad = skip = 0
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    if r in ("OK", "EXPECTEDFAIL"): ok += 1
    elif r == "SKIP": skip += 1
    else: bad += 1
print(f"tests: {ok} passed, {bad} failed" + (f", {skip} skipped" if skip else ""))
PY
exit $rc
