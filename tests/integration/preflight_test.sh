#!/usr/bin/env bash
# dripgate-dataplane --preflight on this machine, as the process runs it: every line is an item
# with a state (or its fix), the exit code is 1 exactly when an item failed, and the drip CPU's
# isolation is reported as the kernel has it.
set -uo pipefail
dp=$1
out=$("$dp" --preflight --config "$2")
rc=$?
echo "$out"
fail() { echo "preflight_test: $*" >&2; exit 1; }
[[ -n $out ]] || fail "no output"
while IFS= read -r line; do
  [[ $line =~ ^\[(\ ok\ |FAIL|\ --\ )\]\ [^:]+:\ .+ || $line =~ ^\ {7}fix:\ .+ ]] ||
    fail "not an item or a fix: '$line'"
done <<<"$out"
if grep -q '^\[FAIL\]' <<<"$out"; then [[ $rc == 1 ]] || fail "an item failed, exit $rc"
else [[ $rc == 0 ]] || fail "nothing failed, exit $rc"; fi
# The example config drips on lcore 1.
if python3 -c 'import sys; s=open("/sys/devices/system/cpu/isolated").read().strip()
sys.exit(0 if any(int(a) <= 1 <= int(b or a) for a, _, b in (p.partition("-") for p in s.split(",") if p)) else 1)'; then
  grep -q '^\[ ok \] drip CPU 1 in isolcpus' <<<"$out" || fail "CPU 1 is isolated, not reported ok"
else
  grep -q '^\[FAIL\] drip CPU 1 in isolcpus' <<<"$out" || fail "CPU 1 is not isolated, not reported"
fi
# --preflight on a config that names no ports at all fails that item.
echo 'dataplane: { eal: ["-l", "0-1", "--no-huge"], classes: { default: {} } }' >"${TMPDIR:-/tmp}/dg-preflight-$$.yaml"
out=$("$dp" --preflight --config "${TMPDIR:-/tmp}/dg-preflight-$$.yaml")
rc=$?
rm -f "${TMPDIR:-/tmp}/dg-preflight-$$.yaml"
[[ $rc == 1 ]] && grep -q '^\[FAIL\] ports: the EAL arguments name no -a PCI device and no --vdev' <<<"$out" ||
  fail "a config without ports passed: $out"
echo "preflight_test: ok"
