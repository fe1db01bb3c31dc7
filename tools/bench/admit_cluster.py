#!/usr/bin/env python3
"""Rounds, figures and the summary of `tools/bench/admit_bench.sh --cluster`, which starts one
standalone Redis with one dripgate-control on it, and a 3-master Redis Cluster with two
dripgate-control daemons on it, and passes their ports here. Not a test: figures only.

Each topology is measured against redis-benchmark sending the daemons' own admit call on the
same topology, in alternating rounds (single daemon, single redis-benchmark, cluster daemons,
cluster redis-benchmark), every window from a flushed keyspace:
  daemons          wrk on each daemon at once (--conns split over them), every request a
                   tenant of the plan "*" (DG_TENANTS: 1,000 tenants, so that on the cluster the
                   admissions spread over the masters as a real fleet's do)
  redis-benchmark  the daemon's admit call captured with MONITOR, a new request id for every
                   call (-r); on the cluster with `--cluster` and the tenant's hash tag replaced
                   by redis-benchmark's `{tag}`, which it fills in per master, so each master
                   gets its share
Per window: decisions/s (summed over the daemons) and Redis's usec_per_call (INFO commandstats
summed over the masters). Then, per topology, Redis memory per tenant: used_memory and DBSIZE
summed over the masters before and after one admission for each of --tenants new tenants (a
tenant bucket, the month's quota counter and the open reservation of each).
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import threading

from admit_bench import RAND, capture, redis_benchmark, replayable, warn_failed, wrk

TENANTS_IN_LOAD = "1000"


class Topology:
    def __init__(self, name, ports, http_ports, cluster):
        self.name, self.ports, self.http_ports, self.cluster = name, ports, http_ports, cluster
        self.clis = [["redis-cli", "-p", str(p)] for p in ports]
        self.rb = ["redis-benchmark", "-p", str(ports[0])] + (["--cluster"] if cluster else [])

    def each(self, *args):
        return [subprocess.run(cli + list(args), check=True, capture_output=True,
                               text=True).stdout for cli in self.clis]

    def info_sum(self, section, field):
        total = 0
        for out in self.each("info", section):
            stat = dict(l.split(":", 1) for l in out.splitlines() if ":" in l)
            total += int(stat.get(field, "0"))
        return total

    def evalsha_stat(self):
        """(calls, usec, failed) of EVALSHA summed over the masters."""
        calls = usec = failed = 0
        for out in self.each("info", "commandstats"):
            m = re.search(r"cmdstat_evalsha:(\S+)", out)
            if not m:
                continue
            st = dict(kv.split("=") for kv in m.group(1).split(","))
            calls += int(st["calls"])
            usec += int(st["usec"])
            failed += int(st.get("failed_calls", 0)) + int(st.get("rejected_calls", 0))
        return calls, usec, failed

    def capture(self):
        """The daemon's admit call for a tenant of plan "*", made replayable by redis-benchmark."""
        body = '{"tenant":"t-capture","tokens":1}'
        cmds, calls, rid = capture(self.clis, self.http_ports[0], body)
        admits = [c for c in calls if len(c) > 3 and "{t:t-capture}" in c[3]]
        if len(admits) != 1:
            raise SystemExit(f"bench: expected one admit call for t-capture, saw {calls}")
        call = replayable(admits[0], rid)
        # The replay must admit once per new id, not answer "live reservation" (-c: follow the
        # cluster's redirect to the tenant's master).
        once = [x.replace(RAND, "9" * len(RAND)) for x in call]
        cli = self.clis[0] + (["-c"] if self.cluster else [])
        first, again = (subprocess.run(cli + once, check=True, capture_output=True,
                                       text=True).stdout.split()[:1] for _ in range(2))
        if first != ["1"] or again != ["2"]:
            raise SystemExit(f"bench: the replayed call does not admit once per request id "
                             f"({first}, {again})")
        if self.cluster:
            call = [x.replace("{t:t-capture}", "{tag}") for x in call]
        self.call = call
        print(f"{self.name}: the daemon's commands for one admission: "
              f"{', '.join(c[0].upper() for c in cmds)}; replayed: {' '.join(call[:4])} …")

    def window(self, run):
        self.each("flushall")
        self.each("config", "resetstat")
        res = run()
        calls, usec, failed = self.evalsha_stat()
        res.update(usec_per_call=usec / max(calls, 1), failed=failed)
        return res

    def daemons(self, conns, secs):
        """wrk on every daemon at once, conns split over them; decisions/s summed."""
        per = max(1, conns // len(self.http_ports))
        out = [None] * len(self.http_ports)

        def one(i, port):
            out[i] = wrk(f"http://127.0.0.1:{port}/v1/admit", WRK_SCRIPT, per, secs,
                         {"DG_TENANTS": TENANTS_IN_LOAD})
        threads = [threading.Thread(target=one, args=(i, p))
                   for i, p in enumerate(self.http_ports)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {"rate": sum(o["rate"] for o in out), "decisions": sum(o["decisions"] for o in out),
                "errors": sum(o["errors"] for o in out)}

    def replay(self, conns, n):
        return redis_benchmark(self.rb, self.call, conns, n)

    def memory(self, tenants):
        """Redis bytes and keys per tenant: one admission for each of `tenants` new tenants,
        spread over the daemons, over pipelined keep-alive connections."""
        self.each("flushall")
        m0, k0 = self.info_sum("memory", "used_memory"), sum(
            int(x) for x in self.each("dbsize"))
        names = [f"m-{i}" for i in range(tenants)]
        lanes = 4 * len(self.http_ports)
        errors = []
        threads = [threading.Thread(target=admit_many, args=(
            self.http_ports[i % len(self.http_ports)], names[i::lanes], errors))
            for i in range(lanes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise SystemExit(f"bench: {len(errors)} admissions failed, first: {errors[0]}")
        m1, k1 = self.info_sum("memory", "used_memory"), sum(
            int(x) for x in self.each("dbsize"))
        self.each("flushall")
        return {"n": tenants, "bytes": (m1 - m0) / tenants, "keys": (k1 - k0) / tenants}


def admit_many(http_port, tenants, errors, depth=64):
    """POST /v1/admit for each tenant (tokens 1), `depth` requests pipelined at a time on one
    keep-alive connection; a non-200 answer goes to `errors`."""
    s = socket.create_connection(("127.0.0.1", http_port))
    buf = b""
    for i in range(0, len(tenants), depth):
        chunk = tenants[i:i + depth]
        s.sendall(b"".join(
            (f"POST /v1/admit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             f"Content-Length: {len(body)}\r\n\r\n{body}").encode()
            for body in (f'{{"tenant":"{t}","tokens":1}}' for t in chunk)))
        for _ in chunk:
            while b"\r\n\r\n" not in buf:
                buf += s.recv(65536)
            head, buf = buf.split(b"\r\n\r\n", 1)
            length = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))
            while len(buf) < length:
                buf += s.recv(65536)
            body, buf = buf[:length], buf[length:]
            if not head.startswith(b"HTTP/1.1 200"):
                errors.append(head.split(b"\r\n", 1)[0].decode() + " " + body.decode())
    s.close()


def main():
    global WRK_SCRIPT
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--single-port", type=int, required=True)
    p.add_argument("--single-http-port", type=int, required=True)
    p.add_argument("--cluster-ports", required=True, help="the masters, comma-separated")
    p.add_argument("--cluster-http-ports", required=True, help="the daemons, comma-separated")
    p.add_argument("--wrk-script", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--conns", type=int, default=32)
    p.add_argument("--tenants", type=int, default=100000)
    a = p.parse_args()
    WRK_SCRIPT = a.wrk_script
    ports = lambda s: [int(x) for x in s.split(",")]
    tops = [Topology("single node", [a.single_port], [a.single_http_port], False),
            Topology("3-master cluster", ports(a.cluster_ports), ports(a.cluster_http_ports),
                     True)]
    for t in tops:
        t.capture()
    # Warm-up, and a first rate to size redis-benchmark's call counts (it takes -n, not time).
    raw_rate = {}
    for t in tops:
        t.daemons(a.conns, 1)
        raw_rate[t.name] = t.replay(a.conns, 20000)["rate"]
    rounds = {t.name: [] for t in tops}
    for r in range(a.rounds):
        for t in tops:
            d = t.window(lambda: t.daemons(a.conns, a.seconds))
            raw = t.window(lambda: t.replay(a.conns, max(5000, int(raw_rate[t.name] * a.seconds))))
            raw_rate[t.name] = raw["rate"]
            rounds[t.name].append((d, raw))
            print(f"round {r + 1} {t.name} ({len(t.http_ports)} daemon(s)): decisions/s "
                  f"{d['rate']:.0f}, redis-benchmark {raw['rate']:.0f}, ratio "
                  f"{d['rate'] / raw['rate']:.2f}; usec_per_call {d['usec_per_call']:.2f} | "
                  f"{raw['usec_per_call']:.2f}", flush=True)
            warn_failed((("daemons", d), ("redis-benchmark", raw)))
    mem = {t.name: t.memory(a.tenants) for t in tops}

    med = lambda xs: statistics.median(list(xs))
    print(f"\nAdmission on one node and on a Redis Cluster: {a.rounds} rounds of {a.seconds} s "
          f"alternating, {a.conns} connections each side, daemons with 1 worker; medians, ratio = "
          f"median of the rounds' ratios")
    print(f"({os.popen('uptime').read().strip()}; {os.cpu_count()} CPUs shared by every process)")
    print(f"| {'topology':<18} | daemons | redis-benchmark/s | dripgate/s | ratio | "
          f"Redis us/call | bytes/tenant | keys/tenant |")
    print("|" + "|".join("-" * w for w in (20, 9, 19, 12, 7, 15, 14, 13)) + "|")
    for t in tops:
        rs = rounds[t.name]
        ratio = med(d["rate"] / raw["rate"] for d, raw in rs)
        print(f"| {t.name:<18} | {len(t.http_ports):>7} | {med(raw['rate'] for _, raw in rs):>17.0f}"
              f" | {med(d['rate'] for d, _ in rs):>10.0f} | {ratio:>4.2f}x | "
              f"{med(d['usec_per_call'] for d, _ in rs):>13.2f} | {mem[t.name]['bytes']:>12.0f} |"
              f" {mem[t.name]['keys']:>11.2f} |")
    for t in tops:
        print(f"{t.name} ratio by round: " +
              " ".join(f"{d['rate'] / raw['rate']:.2f}" for d, raw in rounds[t.name]))
    print(f"memory: one admission (tenant bucket, quota counter, open reservation) for each of "
          f"{a.tenants} tenants, used_memory and DBSIZE summed over the masters")


if __name__ == "__main__":
    main()
