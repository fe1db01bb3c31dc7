#!/usr/bin/env python3
"""Instructions per call of the daemon's admit call and of the minimal bucket script, on a
redis-server under callgrind (tools/bench/admit_lua_cost.sh starts it and the daemon). Not a
test: figures only."""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import admit_bench  # noqa: E402  (capture, replayable, MIN_BUCKET, RAND_RANGE)

# Where an admission's instructions go: inclusive costs of these functions (callgrind_annotate's
# names), each part of the call's total. redis.call's own work (argument conversion, the command)
# is scriptCall; tonumber() converts twice (lua_isnumber, then lua_tonumber) with strtod.
PARTS = [("parsing numbers (strtod: tonumber, string arithmetic)", r"strtod\.c:strtod "),
         ("formatting numbers (printf: string.format, number arguments)",
          r"/vfprintf-internal\.c:__vfprintf_internal "),
         ("redis.call (its arguments, the keyspace commands)", r"\?\?\?:scriptCall ")]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--redis-port", type=int, required=True)
    p.add_argument("--redis-pid", type=int, required=True)
    p.add_argument("--http-port", type=int, required=True)
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--dumps", required=True, help="the directory of callgrind's dumps")
    a = p.parse_args()
    cli = ["redis-cli", "-p", str(a.redis_port)]

    def redis(*args):
        return subprocess.run(cli + list(args), check=True, capture_output=True,
                              text=True).stdout

    _, calls, rid = admit_bench.capture([cli], a.http_port, '{"tenant":"ws-bench","tokens":1}')
    admit = admit_bench.replayable(calls[0], rid)
    sha = redis("script", "load", admit_bench.MIN_BUCKET).strip()
    minimal = ["evalsha", sha, "1", "bench:{t:ws-bench}:min", "1000000000", "1000000000", "600"]
    print(f"admit call ({len(admit) - 3} KEYS and ARGV): " + " ".join(admit))

    def measure(call, label):
        """Instructions per call over --calls calls from a flushed keyspace, and the dump."""
        redis("flushall")
        subprocess.run(["callgrind_control", "-z", str(a.redis_pid)], check=True,
                       capture_output=True)
        subprocess.run(["redis-benchmark", "-p", str(a.redis_port), "-c", "4", "-n",
                        str(a.calls), "-r", admit_bench.RAND_RANGE, "-q"] + call, check=True,
                       capture_output=True)
        before = set(os.listdir(a.dumps))
        subprocess.run(["callgrind_control", "-d", label, str(a.redis_pid)], check=True,
                       capture_output=True)
        new = [f for f in os.listdir(a.dumps) if f.startswith("callgrind.out") and f not in before]
        if len(new) != 1:
            sys.exit(f"bench: expected one new callgrind dump, found {new}")
        ann = subprocess.run(["callgrind_annotate", "--auto=no", "--inclusive=yes",
                              "--threshold=100", os.path.join(a.dumps, new[0])], check=True,
                             capture_output=True, text=True).stdout
        total = int(re.search(r"([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", ann).group(1)
                    .replace(",", ""))
        return total / a.calls, ann

    admit_ir, admit_ann = measure(admit, "admit")
    min_ir, _ = measure(minimal, "minimal")
    print(f"\ninstructions per call ({a.calls} calls each, only inside EVALSHA):")
    print(f"  minimal bucket script  {min_ir:>9,.0f}")
    print(f"  admit.lua              {admit_ir:>9,.0f}   ratio {admit_ir / min_ir:.2f}x")
    print("\nwhere admit.lua's go (inclusive; the parts overlap where redis.call formats numbers):")
    for name, pattern in PARTS:
        m = re.search(r"([\d,]+) \(\s*[\d.]+%\)\s+\S*" + pattern, admit_ann)
        ir = int(m.group(1).replace(",", "")) / a.calls if m else 0
        print(f"  {name:<62} {ir:>8,.0f}  {ir / admit_ir:>5.1%}")


if __name__ == "__main__":
    main()
