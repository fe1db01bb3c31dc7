#!/usr/bin/env python3
"""Rounds and figures of tools/bench/rls_bench.sh: Envoy's ShouldRateLimit over gRPC against
POST /v1/admit over HTTP, on the same daemon and the same Redis, each as a ratio to
redis-benchmark -r sending the daemon's own admit call (EVALSHA). Not a test: figures only.

Every round runs three windows from a flushed keyspace: the gRPC front under rls_load (--conns
calls outstanding on one channel, as Envoy's client multiplexes), the HTTP front under wrk
(--conns connections), and redis-benchmark at --conns; the gRPC and HTTP windows swap places
every other round, so neither always runs on a warmer box. Both fronts ask for the same
admission (tenant ws-bench, 1 token), hence the same script call. The capture, the windows and
the wrk and redis-benchmark runs are admit_bench.py's.
"""
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import admit_bench  # noqa: E402


class RlsBench(admit_bench.Bench):
    def rls(self, calls, secs):
        out = subprocess.run([self.a.rls_load, "--target", f"127.0.0.1:{self.a.grpc_port}",
                              "--calls", str(calls), "--seconds", str(secs), "--hits", "1"],
                             check=True, capture_output=True, text=True).stdout
        line = next(l for l in out.splitlines() if l.startswith("RLS_RESULT"))
        rate, p50, p99, calls_done, bad = line.split()[1:]
        return {"rate": float(rate), "p50": float(p50), "p99": float(p99),
                "decisions": int(calls_done) - int(bad), "errors": int(bad)}

    def run(self):
        a = self.a
        self.capture()
        # Warm-up, and a first redis-benchmark figure to size its call count (-n, not time).
        self.rls(a.conns, 1)
        self.wrk(a.conns, 1)
        raw_rate = self.redis_benchmark(self.call, a.conns, 20000)["rate"]
        rounds = []
        for r in range(a.rounds):
            fronts = [("grpc", lambda: self.rls(a.conns, a.seconds)),
                      ("http", lambda: self.wrk(a.conns, a.seconds))]
            if r % 2:
                fronts.reverse()
            got = {name: self.window(run, self.cmd) for name, run in fronts}
            raw = self.window(lambda: self.redis_benchmark(
                self.call, a.conns, self.size(raw_rate, a.seconds)), self.cmd)
            raw_rate = raw["rate"]
            g, h = got["grpc"], got["http"]
            rounds.append((g, h, raw))
            print(f"round {r + 1} ({' then '.join(n for n, _ in fronts)}): decisions/s grpc "
                  f"{g['rate']:.0f} ({g['rate'] / raw['rate']:.2f}x), http {h['rate']:.0f} "
                  f"({h['rate'] / raw['rate']:.2f}x), redis-benchmark {raw['rate']:.0f}; p50 us "
                  f"grpc {g['p50']:.0f} http {h['p50']:.0f}; daemon CPU us/decision grpc "
                  f"{g['daemon_us']:.1f} http {h['daemon_us']:.1f}", flush=True)
            for name, w in (("grpc", g), ("http", h), ("redis-benchmark", raw)):
                if w["failed"] or w["errors"]:
                    print(f"  warning: {name} window: {w['failed']} failed Redis calls, "
                          f"{w['errors']} errors")
                if name != "redis-benchmark" and abs(w["calls"] - w["decisions"]) > 0.02 * max(
                        w["decisions"], 1):
                    print(f"  warning: {name}: {w['calls']} script calls for {w['decisions']} "
                          "decisions")
        med = lambda xs: statistics.median(list(xs))
        g_ratio = [g["rate"] / raw["rate"] for g, _, raw in rounds]
        h_ratio = [h["rate"] / raw["rate"] for _, h, raw in rounds]
        print(f"\nShouldRateLimit (gRPC) vs POST /v1/admit (HTTP): {a.rounds} rounds of "
              f"{a.seconds} s, {a.conns} calls/connections, daemon {a.threads} thread(s) per "
              f"front; medians over the rounds\n({os.popen('uptime').read().strip()})")
        print(f"| {'front':<24} | {'decisions/s':>11} | {'x EVALSHA':>9} | {'p50 us':>7} | "
              f"{'p99 us':>7} | {'CPU us/dec':>10} |")
        print("|" + "-" * 26 + "|" + "-" * 13 + "|" + "-" * 11 + "|" + "-" * 9 + "|" + "-" * 9 +
              "|" + "-" * 12 + "|")
        for name, i, ratios in (("grpc ShouldRateLimit", 0, g_ratio),
                                ("http POST /v1/admit", 1, h_ratio),
                                ("redis-benchmark EVALSHA", 2, None)):
            ws = [rd[i] for rd in rounds]
            ratio = f"{med(ratios):.2f}x" if ratios else "1.00x"
            cpu = f"{med(w['daemon_us'] for w in ws):.1f}" if ratios else "-"
            print(f"| {name:<24} | {med(w['rate'] for w in ws):>11.0f} | {ratio:>9} | "
                  f"{med(w['p50'] for w in ws):>7.0f} | {med(w['p99'] for w in ws):>7.0f} | "
                  f"{cpu:>10} |")
        print("\ngrpc ratio by round: " + " ".join(f"{x:.2f}" for x in g_ratio))
        print("http ratio by round: " + " ".join(f"{x:.2f}" for x in h_ratio))


def main():
    p = admit_bench.arguments(__doc__)
    p.add_argument("--grpc-port", type=int, required=True)
    p.add_argument("--rls-load", required=True)
    RlsBench(p.parse_args()).run()


if __name__ == "__main__":
    main()
