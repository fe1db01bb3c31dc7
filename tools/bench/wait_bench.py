#!/usr/bin/env python3
"""Load, rounds and figures of `tools/bench/wait_bench.sh`, which starts Redis (one node or a
3-master cluster) and the daemons and passes their ports here. Not a test: figures only.

One global model gate (capacity C, refill R/s) is overloaded OVERLOAD times by tenants in two
bands (plan gold: queue priority 0, plan free: priority 1). The load is open: each tenant starts
a new request every tenants/(OVERLOAD·R) s whatever became of the earlier ones, so both modes
are offered the same requests (a closed loop's offer would follow each mode's answer times).
Every request has the same deadline, --max-wait-ms after it was started. Modes, alternated
round by round (the order turned every round, so a drift of the machine hits both alike):
  wait   the request asks to wait (max_wait_ms = the deadline): one HTTP request, answered when
         admitted, or 429 at its deadline;
  retry  the baseline: max_wait_ms 0, and a refused request sleeps the answer's retry_after_ms
         exactly (a client honouring Retry-After to the millisecond) and sends the same request
         again, until admitted or the next try would fall past its deadline;
  retry-jitter (--modes): as retry, the sleep drawn from [retry_after_ms, 2·retry_after_ms).
Tenant i talks to daemon i mod daemons, over keep-alive HTTP/1.1 connections of its own.
Every time is taken here, at the client: a request's time to admission runs from its first
send to the admitting answer's arrival, and includes the HTTP hop to the daemon.
"""
import argparse
import asyncio
import json
import random
import re
import statistics
import subprocess
import time


class Conn:
    """One keep-alive HTTP/1.1 connection to a daemon."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    async def post(self, port, body):
        """(status, parsed JSON body) of POST /v1/admit."""
        self.writer.write(b"POST /v1/admit HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: "
                          b"application/json\r\nContent-Length: %d\r\n\r\n%s"
                          % (port, len(body), body))
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
        data = await self.reader.readexactly(int(m.group(1))) if m else b"{}"
        return status, json.loads(data)


class Tenant:
    def __init__(self, name, band, port):
        self.name, self.band, self.port = name, band, port
        self.idle = []        # (connection not in use, since when)
        self.started = 0      # requests started
        self.admitted = []    # (time from first send to admission s, daemon waited_ms or None,
                              #  the admitting answer's arrival)
        self.expired = 0      # answered 429 at the deadline, or gave up before it
        self.errors = {}      # what went wrong instead of an answer (HTTP status or exception)

    def error(self, kind):
        self.errors[kind] = self.errors.get(kind, 0) + 1

    async def conn(self):
        # The daemon closes a connection idle for its request_timeout_s (10 s by default): one
        # idle half as long is closed here instead of failing the request sent on it.
        while self.idle:
            conn, since = self.idle.pop()
            if time.perf_counter() - since < 5:
                return conn
            conn.writer.close()
        return Conn(*await asyncio.open_connection("127.0.0.1", self.port))


class Round:
    def __init__(self, args, mode, tenants):
        self.args, self.mode, self.tenants = args, mode, tenants
        self.admit_times = []   # arrival time of every admitting answer
        self.attempts = 0       # HTTP requests sent
        self.first_send = None

    async def request(self, t):
        a = self.args
        deadline_s = a.max_wait_ms / 1000
        wait = self.mode == "wait"
        body = json.dumps({"tenant": t.name, "model": "m",
                           "max_wait_ms": a.max_wait_ms if wait else 0}).encode()
        t.started += 1
        start = time.perf_counter()
        if self.first_send is None:
            self.first_send = start
        conn = None
        try:
            conn = await t.conn()
            while True:
                self.attempts += 1
                status, ans = await asyncio.wait_for(conn.post(t.port, body), deadline_s + 5)
                now = time.perf_counter()
                if status == 200:
                    self.admit_times.append(now)
                    t.admitted.append((now - start, ans.get("waited_ms"), now))
                    break
                if status != 429:
                    t.error(f"HTTP {status} {ans.get('reason') or ans.get('error') or ''}".strip())
                    break
                if wait or ans.get("reason") != "rate":
                    t.expired += 1
                    break
                sleep = ans.get("retry_after_ms", 1) / 1000
                if self.mode == "retry-jitter":
                    sleep *= 1 + random.random()
                if now + sleep - start > deadline_s:
                    t.expired += 1
                    break
                await asyncio.sleep(sleep)
            t.idle.append((conn, time.perf_counter()))
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as e:
            t.error(type(e).__name__)
            if conn:
                conn.writer.close()

    async def tenant_load(self, t, t0, tasks):
        """Starts one request every 1/rate s for --seconds, on an absolute schedule (a late
        loop catches up) from a random phase, so the tenants do not fire together."""
        a = self.args
        every = len(self.tenants) / (a.overload * a.rate)
        k, phase = 0, random.random() * every
        while True:
            at = t0 + phase + k * every
            if at >= t0 + a.seconds:
                return
            delay = at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(self.request(t)))
            k += 1

    async def run(self):
        tasks = []
        t0 = time.perf_counter()
        self.t0 = t0
        await asyncio.gather(*(self.tenant_load(t, t0, tasks) for t in self.tenants))
        self.end_offer = time.perf_counter()
        await asyncio.gather(*tasks)
        for t in self.tenants:
            for c, _ in t.idle:
                c.writer.close()
            t.idle = []


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))]


def jain(xs):
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if xs and any(xs) else float("nan")


def script_calls(redis_ports):
    """EVALSHA + EVAL calls so far, summed over the Redis processes (a cluster's masters)."""
    total = 0
    for p in redis_ports:
        out = subprocess.run(["redis-cli", "-p", str(p), "info", "commandstats"], check=True,
                             capture_output=True, text=True).stdout
        total += sum(int(n) for n in re.findall(r"cmdstat_eval(?:sha)?:calls=(\d+)", out))
    return total


def token_histogram(http_ports):
    """dripgate_queue_token_to_admission_seconds's buckets so far, summed over the daemons:
    {upper bound (s): cumulative count}."""
    import urllib.request
    total = {}
    for p in http_ports:
        text = urllib.request.urlopen(f"http://127.0.0.1:{p}/metrics", timeout=5).read().decode()
        for le, n in re.findall(
                r'^dripgate_queue_token_to_admission_seconds_bucket\{le="([^"]+)"\} (\d+)$', text,
                re.M):
            total[float(le)] = total.get(float(le), 0) + int(n)
    return total


def histogram_pct(before, after, q):
    """The upper bound of the bucket that holds quantile q of what was observed in between
    (a bound, not an interpolation: the figure is at most this)."""
    counts = sorted((le, after[le] - before.get(le, 0)) for le in after)
    if not counts or counts[-1][1] == 0:
        return float("nan")
    for le, n in counts:
        if n >= q / 100 * counts[-1][1]:
            return le
    return float("inf")


def make_tenants(args):
    ports = [int(p) for p in args.http_ports.split(",")]
    names = [("g%02d" % i, 0) for i in range(args.gold)] + \
            [("f%02d" % i, 1) for i in range(args.free)]
    return [Tenant(n, b, ports[i % len(ports)]) for i, (n, b) in enumerate(names)]


def one_round(args, mode):
    tenants = make_tenants(args)
    r = Round(args, mode, tenants)
    calls0 = script_calls(args.redis_ports)
    ports = [int(p) for p in args.http_ports.split(",")]
    hist0 = token_histogram(ports)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    asyncio.run(r.run())
    cpu = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    calls = script_calls(args.redis_ports) - calls0
    hist = token_histogram(ports)
    a = args
    f = {}
    admitted = sum(len(t.admitted) for t in tenants)
    started = sum(t.started for t in tenants)
    f["offered/s (client)"] = started / (r.end_offer - r.t0)
    # The saturated window: from --warmup s after the start to the end of the offer.
    lo, hi = r.t0 + a.warmup, r.t0 + a.seconds
    inwin = sorted(x for x in r.admit_times if lo <= x <= hi)
    f["admitted/s, saturated window"] = len(inwin) / (hi - lo)
    f["admitted rate vs gate rate %"] = 100 * (len(inwin) / (hi - lo) / a.rate - 1)
    # With a capacity of 1 a token not taken at once is lost (the bucket is full), so the rate's
    # shortfall is the mean delay between a token becoming available and its admission.
    f["mean token -> admission ms, from rate"] = (
        (hi - lo) / len(inwin) * 1000 - 1000 / a.rate if inwin and a.capacity == 1 else float("nan"))
    gaps = [(y - x) * 1000 - 1000 / a.rate for x, y in zip(inwin, inwin[1:])]
    f["token -> admission p50 ms"] = pct(gaps, 50)
    f["token -> admission p99 ms"] = pct(gaps, 99)
    # In the daemon: from the time its gate held the token to the admitting answer
    # (dripgate_queue_token_to_admission_seconds); the bucket's upper bound.
    f["daemon: token -> admission p50 ms, at most"] = histogram_pct(hist0, hist, 50) * 1000
    f["daemon: token -> admission p99 ms, at most"] = histogram_pct(hist0, hist, 99) * 1000
    for band, label in ((0, "gold"), (1, "free")):
        ts = [t for t in tenants if t.band == band]
        if not ts:
            continue
        lat = [x[0] * 1000 for t in ts for x in t.admitted]
        waited = [x[1] for t in ts for x in t.admitted if x[1] is not None]
        st = sum(t.started for t in ts)
        f[f"{label}: admitted %"] = 100 * len(lat) / max(st, 1)
        f[f"{label}: expired (429 at deadline) %"] = 100 * sum(t.expired for t in ts) / max(st, 1)
        f[f"{label}: to admission p50 ms"] = pct(lat, 50)
        f[f"{label}: to admission p99 ms"] = pct(lat, 99)
        f[f"{label}: daemon waited_ms p99"] = pct(waited, 99) if waited else float("nan")
        # Over the saturated window: once the offer stops, the last waiters drain uncontended.
        per = [sum(lo <= x[2] <= hi for x in t.admitted) for t in ts]
        f[f"{label}: Jain index, {len(ts)} tenants"] = jain(per)
        f[f"{label}: admitted per tenant, min"] = min(per)
        f[f"{label}: admitted per tenant, max"] = max(per)
        # With several daemons: each daemon's mean over its tenants of the band, the lowest and
        # the highest (an uneven share between daemons shows here, not within one).
        by_port = {}
        for t, n in zip(ts, per):
            by_port.setdefault(t.port, []).append(n)
        if len(by_port) > 1:
            means = [statistics.mean(v) for v in by_port.values()]
            f[f"{label}: per tenant, lowest daemon's mean"] = min(means)
            f[f"{label}: per tenant, highest daemon's mean"] = max(means)
    f["HTTP requests sent per admitted"] = r.attempts / max(admitted, 1)
    f["Redis script calls per admitted"] = calls / max(admitted, 1)
    span = (max(r.admit_times) - r.first_send) if r.admit_times else 0
    allowed = a.capacity + a.rate * span
    f["admitted in the round"] = admitted
    f["allowed: capacity + R x span"] = allowed
    f["over-admission (<= 0)"] = admitted - allowed
    f["errors"] = sum(n for t in tenants for n in t.errors.values())
    f["load generator CPU % of one core"] = 100 * cpu
    kinds = {}
    for t in tenants:
        for k, n in t.errors.items():
            kinds[k] = kinds.get(k, 0) + n
    return f, kinds


def fmt(v):
    if isinstance(v, int):
        return f"{v:,}"
    if v != v:
        return "-"
    return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3f}" if abs(v) < 10 else f"{v:.2f}"


def table(title, cols, names):
    lines = [title, f"{'':38}" + "".join(f"{c:>14}" for c, _ in cols)]
    for n in names:
        lines.append(f"{n:38}" + "".join(f"{fmt(f.get(n, float('nan'))):>14}" for _, f in cols))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--http-ports", required=True)
    p.add_argument("--redis-ports", required=True, type=lambda s: s.split(","))
    p.add_argument("--modes", default="wait,retry")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--rate", type=float, default=200)
    p.add_argument("--capacity", type=float, default=1)
    p.add_argument("--overload", type=float, default=3)
    p.add_argument("--gold", type=int, default=4)
    p.add_argument("--free", type=int, default=16)
    p.add_argument("--max-wait-ms", type=int, default=2000)
    p.add_argument("--setup", default="")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    modes = args.modes.split(",")
    cols, names, errs = [], [], []
    for i in range(args.rounds):
        order = modes if i % 2 == 0 else modes[::-1]
        for mode in order:
            f, kinds = one_round(args, mode)
            names = names or list(f)
            cols.append((f"r{i + 1} {mode}", f))
            print(table(f"round {i + 1}, {mode}", [cols[-1]], names), flush=True)
            if kinds:
                errs.append(f"r{i + 1} {mode}: " + ", ".join(f"{k} {n}" for k, n in kinds.items()))
                print("errors: " + errs[-1], flush=True)
            time.sleep(1)
    head = (f"{args.setup}; gate capacity {fmt(args.capacity)}, {fmt(args.rate)}/s; offered "
            f"{fmt(args.overload)}x by {args.gold} gold (band 0) + {args.free} free (band 1) "
            f"tenants; deadline {args.max_wait_ms} ms; {fmt(args.seconds)} s rounds (saturated "
            f"window from {fmt(args.warmup)} s); all figures measured at the client (times "
            f"include the HTTP hop)")
    med = [(m, {n: statistics.median(f[n] for c, f in cols if c.endswith(" " + m))
                for n in names}) for m in modes]
    ints = [n for n in names if all(isinstance(f[n], int) for _, f in cols)]
    for _, f in med:
        for n in ints:
            f[n] = int(f[n])
    text = "\n\n".join([head, table("every round", cols, names)] +
                        (["errors by kind: " + "; ".join(errs)] if errs else []) +
                        [table(f"median of {args.rounds} rounds", med, names)])
    print("\n" + text)
    with open(args.out, "w") as fh:
        fh.write(text + "\n")
    print(f"\n(written to {args.out})")


if __name__ == "__main__":
    main()
