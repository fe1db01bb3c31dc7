#!/usr/bin/env bash
# Build one libFuzzer target with ASan+UBSan and run it for a bounded time.
#
#   tools/fuzz.sh NAME SECONDS SOURCE... [-- EXTRA_FLAGS...]
#
# SOURCE paths are relative to the repo root or absolute. EXTRA_FLAGS go to clang++ (e.g. -D..., -l...).
# Optional environment:
#   FUZZ_SEED_DIR  directory of seed inputs (read only; copied into the working corpus)
#   FUZZ_KEEP=1    keep the temp dir (corpus, crash files, log) and print its path
#   CXX_FUZZ       compiler (default clang++; not $CXX, which is often g++)
# Exit status: 0 when the run finished without a finding, non-zero on a build failure or a crash.
set -euo pipefail

usage() {
  echo "usage: $0 NAME SECONDS SOURCE... [-- EXTRA_FLAGS...]" >&2
  exit 2
}

[[ $# -ge 3 ]] || usage
name=$1
seconds=$2
shift 2
[[ $seconds =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a whole number, got '$seconds'" >&2; exit 2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sources=()
extra=()
while [[ $# -gt 0 ]]; do
  if [[ $1 == -- ]]; then
    shift
    extra=("$@")
    break
  fi
  src=$1
  [[ $src == /* ]] || src=$repo/$src
  [[ -f $src ]] || { echo "fuzz.sh: no such source: $1" >&2; exit 2; }
  sources+=("$src")
  shift
done
[[ ${#sources[@]} -gt 0 ]] || usage

cxx=${CXX_FUZZ:-clang++}
command -v "$cxx" >/dev/null || { echo "fuzz.sh: $cxx not found (install clang)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/dripgate-fuzz-$name.XXXXXX")
cleanup() {
  if [[ ${FUZZ_KEEP:-0} == 1 ]]; then
    echo "fuzz.sh: kept $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

bin=$work/$name
echo "fuzz.sh: building $name"
"$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$repo" "${sources[@]}" "${extra[@]}" -o "$bin"

mkdir -p "$work/corpus" "$work/artifacts"
if [[ -n ${FUZZ_SEED_DIR:-} ]]; then
  [[ -d $FUZZ_SEED_DIR ]] || { echo "fuzz.sh: FUZZ_SEED_DIR $FUZZ_SEED_DIR is not a directory" >&2; exit 2; }
  cp -r "$FUZZ_SEED_DIR"/. "$work/corpus/"
fi

echo "fuzz.sh: running $name for ${seconds}s"
log=$work/fuzz.log
status=0
(cd "$work" && "$bin" -max_total_time="$seconds" -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus") >"$log" 2>&1 || status=$?

if [[ $status -ne 0 ]]; then
  cat "$log"
  echo "fuzz.sh: $name FAILED (exit $status); reproducer(s):"
  for f in "$work"/artifacts/*; do
    [[ -e $f ]] || continue
    echo "  $f"
    od -A x -t x1z -v "$f" | head -n 40
  done
  FUZZ_KEEP=1
  exit "$status"
fi

# The summary: the last progress line and libFuzzer's final stats.
grep -E '^#[0-9]+[[:space:]]+DONE|^Done [0-9]+ runs|^stat::' "$log" || tail -n 20 "$log"
echo "fuzz.sh: $name OK, corpus $(find "$work/corpus" -type f | wc -l) inputs"
