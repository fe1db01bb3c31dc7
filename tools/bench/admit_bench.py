#!/usr/bin/env python3
"""Rounds, figures and the summary of tools/bench/admit_bench.sh (which starts Redis and
dripgate-control and passes their pids here). Not a test: figures only.

Phases, all on the same Redis and the same daemon, the keyspace flushed before each window so
every window starts from the same state (one tenant bucket, no reservations):
  peak      N rounds, each: the daemon under wrk at --conns (POST /v1/admit), then
            redis-benchmark -r at --conns sending the daemon's own admit call (captured with
            MONITOR, the request id made new for every call), then redis-benchmark running the
            minimal bucket script below. Per window: decisions/s, CONFIG RESETSTAT then
            INFO commandstats (usec_per_call), and /proc/<pid>/stat utime+stime of the daemon and
            of Redis over the window divided by the decisions. Between the daemon's and
            redis-benchmark's windows, the HTTP floor's (Floor): nginx under the same wrk.
  half      N rounds of the daemon and redis-benchmark at the same low concurrency, the lowest
            at which the daemon's closed-loop rate reaches half its median peak (2 s probes):
            p50/p99. wrk2 (constant rate) is not in Debian; wrk's delay() paces in whole
            milliseconds and fires connections in bursts that measure wrk, so this is closed
            loop at low concurrency, the same for both sides.
  memory    used_memory and DBSIZE before and after --memory-calls admit calls (the captured
            call, new request ids): bytes and keys per open reservation.
  five      N rounds of a request that passes five gates (--five-body: tenant and user request
            buckets, the tenant's token-rate bucket, a model's and a tool's global buckets, and
            the quota): the daemon under wrk at --conns, then redis-benchmark -r sending the
            daemon's three script calls of one admission (admit.lua, two gates.lua: one call
            per hash slot), one redis-benchmark process per call, all at once, --conns
            connections each; decisions/s of the raw side = calls per process / the wall time
            until the last process is done (a decision needs all three calls).
  periods   N rounds of redis-benchmark -r sending, one after the other, the daemon's admit call
            for the bench plan (a monthly quota) and for a plan with a daily and a monthly quota
            (--periods-body): Redis usec_per_call of each, the cost of a second quota period.
            --periods-only measures this alone.
"""
import argparse
import csv
import io
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time

# The baseline for the script's own cost: a textbook token bucket in one hash, what a
# rate limiter without quota, reservations or undo does per call. TIME is its clock, as in
# admit.lua (a caller-supplied clock cannot be varied by redis-benchmark).
MIN_BUCKET = """
local b = redis.call('HMGET', KEYS[1], 'tk', 'ts')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cap, rate = tonumber(ARGV[1]), tonumber(ARGV[2])
local tk = tonumber(b[1]) or cap
local ts = tonumber(b[2]) or now
tk = math.min(cap, tk + (now - ts) * rate / 1000000)
local ok = tk >= 1
if ok then tk = tk - 1 end
redis.call('HSET', KEYS[1], 'tk', tk, 'ts', now)
redis.call('EXPIRE', KEYS[1], ARGV[3])
return ok and 1 or 0
"""
# redis-benchmark -r N puts 12 digits (random below N) in place of each of these, anew in every
# call and for every occurrence: the reservation key and the request_id argument get different
# ids of the same length (the cost is the same). N is read as a C int: above 2^31 it wraps, and
# above 2^32 it can become 0 (every call the same id, answered "live reservation").
RAND = "__rand_int__"
# A script call's deadline far ahead (control/admission/script_calls.h's kNoDeadline).
NO_DEADLINE = "9999999999999"
RAND_RANGE = "2000000000"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def post_raw(http_port, body):
    """One POST /v1/admit on its own connection: the whole answer, head and body (exits unless
    admitted)."""
    s = socket.create_connection(("127.0.0.1", http_port))
    s.sendall((f"POST /v1/admit HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
               f"{body}").encode())
    reply = b""
    while chunk := s.recv(65536):
        reply += chunk
    s.close()
    text = reply.decode()
    if '"allowed":true' not in text:
        sys.exit(f"bench: admission failed:\n{text}")
    return text


def post(http_port, body):
    """One POST /v1/admit on its own connection; the answer's JSON (exits unless admitted)."""
    text = post_raw(http_port, body)
    return json.loads(text[text.index("{"):])


def cpu_split(pid):
    """CPU seconds (user, system; all threads) of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def cpu_seconds(pid):
    """CPU seconds (utime + stime, all threads) of a process so far."""
    return sum(cpu_split(pid))


# The floor of any HTTP/1.1 server on this machine: nginx, one process, answering every request
# with the daemon's own answer (same head fields, same body) from memory, keep-alive, no log.
# Its CPU per request is what the kernel's loopback TCP and the minimal read and send per
# request cost here, before any work; the daemon's CPU above it is its own.
NGINX_CONF = """daemon off; master_process off; worker_processes 1;
pid {dir}/nginx.pid; error_log {dir}/nginx.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off; server_tokens off; keepalive_requests 1000000000; keepalive_timeout 600s;
  client_body_temp_path {dir}/nginx-body; proxy_temp_path {dir}/nginx-proxy;
  fastcgi_temp_path {dir}/nginx-fastcgi; uwsgi_temp_path {dir}/nginx-uwsgi;
  scgi_temp_path {dir}/nginx-scgi;
  server {{
    listen 127.0.0.1:{port};
    location / {{
      default_type {ctype};
{headers}
      return 200 '{body}';
    }}
  }}
}}
"""


class Floor:
    """nginx answering the daemon's answer (NGINX_CONF) on a free port, while in a with block."""

    def __init__(self, work_dir, answer):
        head, body = answer.split("\r\n\r\n", 1)
        fields = [l.split(":", 1) for l in head.split("\r\n")[1:]]
        own = {"content-length", "content-type", "connection", "date", "server", "keep-alive"}
        ctype = next((v.strip() for k, v in fields if k.lower() == "content-type"), "text/plain")
        quote = lambda v: "'" + v.strip().replace("\\", "\\\\").replace("'", "\\'") + "'"
        headers = "\n".join(f"      add_header {k} {quote(v)} always;" for k, v in fields
                             if k.lower() not in own)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.conf = os.path.join(work_dir, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(NGINX_CONF.format(dir=work_dir, port=self.port, ctype=ctype, headers=headers,
                                      body=body.replace("\\", "\\\\").replace("'", "\\'")))
        self.work_dir = work_dir
        self.url = f"http://127.0.0.1:{self.port}/v1/admit"

    def __enter__(self):
        self.proc = subprocess.Popen(["nginx", "-p", self.work_dir, "-e",
                                      os.path.join(self.work_dir, "nginx.log"), "-c", self.conf])
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port)).close()
                break
            except OSError:
                if self.proc.poll() is not None:
                    sys.exit("bench: nginx did not start: " +
                             open(os.path.join(self.work_dir, "nginx.log")).read())
                time.sleep(0.05)
        self.pid = self.proc.pid
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait()


def capture(clis, http_port, body):
    """The daemon's Redis commands for one admission (after a warm-up one), as sent, seen with
    MONITOR on every node in `clis` (redis-cli commands): (commands, script calls, request_id)."""
    post(http_port, body)
    mons = [subprocess.Popen(cli + ["monitor"], stdout=subprocess.PIPE, text=True) for cli in clis]
    for mon in mons:
        mon.stdout.readline()  # "OK": MONITOR is on
    rid = post(http_port, body)["request_id"]
    time.sleep(0.3)
    out = ""
    for mon in mons:
        mon.terminate()
        out += mon.communicate()[0]
    # Commands a script runs show as client "lua": not the daemon's.
    cmds = [[bytes(x, "utf-8").decode("unicode_escape")
             for x in re.findall(r'"((?:[^"\\]|\\.)*)"', line)]
            for line in out.splitlines() if not re.search(r"\[\d+ lua\]", line)]
    # Not the admission's: the registry's and the brake's polls, the cluster's slot-map reads.
    cmds = [c for c in cmds if c and c[0].lower() != "cluster"
            and not any("{registry}" in x or "{brake}" in x for x in c)]
    calls = [c for c in cmds if c[0].lower() in ("evalsha", "eval", "fcall", "fcall_ro")]
    if not calls:
        sys.exit("bench: no script call seen in MONITOR output:\n" + out)
    return cmds, calls, rid


def replayable(call, rid):
    """`call` with its request id made new by redis-benchmark -r for every call: same length as
    the daemon's id, so the reservation key and record weigh the same. A global gate's attempt
    marker key (":a:<16 hex digits>", which gates.lua answers "cancelled" once it exists) is made
    new the same way, at the same length (__rand_int__ becomes 12 digits)."""
    new_rid = (rid[:-len(RAND)] if len(rid) > len(RAND) else rid + ".") + RAND
    return [re.sub(r"(\}:a:)[0-9a-f]{16}$", r"\g<1>0000" + RAND, x.replace(rid, new_rid))
            for x in call]


def wrk(url, script, conns, secs, env=None):
    """One wrk window (one thread, `conns` connections) with a WRK_RESULT line's figures."""
    out = subprocess.run(["wrk", "-t1", f"-c{conns}", f"-d{secs}s", "-s", script, url],
                         check=True, capture_output=True, text=True,
                         env=dict(os.environ, **(env or {}))).stdout
    line = next(l for l in out.splitlines() if l.startswith("WRK_RESULT"))
    rps, p50, p99, reqs, bad = line.split()[1:]
    ok = int(reqs) - int(bad)
    return {"rate": float(rps) * ok / max(int(reqs), 1), "p50": float(p50), "p99": float(p99),
            "decisions": ok, "errors": int(bad)}


def redis_benchmark(base, call, conns, n):
    """redis-benchmark (`base`: the command and its node flags) sending `call` n times, a new
    __rand_int__ each time; the figures of its CSV row (in cluster mode it prints the node list
    first)."""
    out = subprocess.run(base + ["-c", str(conns), "-n", str(n), "-r", RAND_RANGE, "--csv"] + call,
                         check=True, capture_output=True, text=True).stdout
    rows = [r for r in csv.reader(io.StringIO(out)) if r]
    head = next(r for r in rows if r[0] == "test")
    row = rows[-1]
    get = lambda k: float(row[head.index(k)])
    return {"rate": get("rps"), "p50": get("p50_latency_ms") * 1000,
            "p99": get("p99_latency_ms") * 1000, "decisions": n, "errors": 0}


def warn_failed(windows):
    """A warning for each (name, window) with failed Redis calls or HTTP errors."""
    for name, w in windows:
        if w["failed"] or w["errors"]:
            print(f"  warning: {name} window: {w['failed']} failed Redis calls, "
                  f"{w['errors']} HTTP errors")


def redis_benchmarks(base, calls, conns, n):
    """One redis-benchmark per call in `calls`, all started at once, each sending its call n
    times: decisions/s = n / the wall time until the last one is done."""
    t0 = time.monotonic()
    procs = [subprocess.Popen(base + ["-c", str(conns), "-n", str(n), "-r", RAND_RANGE, "-q"]
                              + call, stdout=subprocess.DEVNULL) for call in calls]
    if any(p.wait() for p in procs):
        sys.exit("bench: redis-benchmark failed")
    return {"rate": n / (time.monotonic() - t0), "decisions": n, "errors": 0}


class Bench:
    def __init__(self, a):
        self.a = a
        where = ["-s", a.redis_socket] if a.redis_socket else ["-p", str(a.redis_port)]
        self.cli = ["redis-cli"] + where
        self.rb = ["redis-benchmark"] + where
        self.url = f"http://127.0.0.1:{a.http_port}/v1/admit"

    def redis(self, *args):
        return subprocess.run(self.cli + list(args), check=True, capture_output=True,
                              text=True).stdout

    def info(self, section):
        return dict(line.split(":", 1) for line in self.redis("info", section).splitlines()
                    if ":" in line)

    def cmdstat(self, cmd):
        raw = self.info("commandstats").get(f"cmdstat_{cmd}", "")
        stat = dict(kv.split("=") for kv in raw.strip().split(",") if "=" in kv)
        return {k: float(v) for k, v in stat.items()}

    def post(self, body):
        return post(self.a.http_port, body)

    def capture(self):
        """The daemon's Redis commands for one admission (after a warm-up one), as sent."""
        cmds, calls, rid = capture([self.cli], self.a.http_port, self.a.body)
        self.call = replayable(calls[0], rid)
        self.cmd = self.call[0].lower()
        print(f"daemon's Redis commands for one admission: {len(cmds)} "
              f"({', '.join(c[0].upper() for c in cmds)})")
        print("admit call replayed by redis-benchmark: " + " ".join(self.call))
        # The replay must do the daemon's work: admitted once per new id, not "live reservation".
        once = [self.call[0]] + [x.replace(RAND, "9" * len(RAND)) for x in self.call[1:]]
        if self.redis(*once).split()[:1] != ["1"] or self.redis(*once).split()[:1] != ["2"]:
            sys.exit("bench: the replayed call does not admit once per request id")
        self.min_sha = self.redis("script", "load", MIN_BUCKET).strip()
        self.min_call = ["evalsha", self.min_sha, "1", "bench:{t:ws-bench}:min", "1000000000",
                         "1000000000", "600"]

    def window(self, run, cmd):
        """Runs one load window from a flushed keyspace; adds Redis's and /proc's figures (the
        daemon's system time apart too: the kernel's work for it, which no change to the daemon's
        own code takes away)."""
        self.redis("flushall")
        self.redis("config", "resetstat")
        (du0, ds0), r0 = cpu_split(self.a.daemon_pid), cpu_seconds(self.a.redis_pid)
        res = run()
        (du1, ds1), r1 = cpu_split(self.a.daemon_pid), cpu_seconds(self.a.redis_pid)
        st = self.cmdstat(cmd)
        n = max(res["decisions"], 1)
        res.update(usec_per_call=st.get("usec_per_call", 0.0), calls=int(st.get("calls", 0)),
                   failed=int(st.get("failed_calls", 0) + st.get("rejected_calls", 0)),
                   daemon_us=(du1 - du0 + ds1 - ds0) * 1e6 / n,
                   daemon_sys_us=(ds1 - ds0) * 1e6 / n, redis_us=(r1 - r0) * 1e6 / n)
        return res

    def wrk(self, conns, secs):
        return wrk(self.url, self.a.wrk_script, conns, secs)

    def redis_benchmark(self, call, conns, n):
        return redis_benchmark(self.rb, call, conns, n)

    def size(self, rate, secs):
        return max(5000, int(rate * secs))

    def run(self):
        a = self.a
        self.capture()
        # Warm-up: first figures to size redis-benchmark's call counts (it takes -n, not time).
        self.wrk(a.conns, 1)
        raw_rate = self.redis_benchmark(self.call, a.conns, 20000)["rate"]
        min_rate = self.redis_benchmark(self.min_call, a.conns, 20000)["rate"]
        floor = Floor(a.work_dir, post_raw(a.http_port, a.body))
        peak = []
        for r in range(a.rounds):
            d = self.window(lambda: self.wrk(a.conns, a.seconds), self.cmd)
            with floor:
                u0, s0 = cpu_split(floor.pid)
                fl = wrk(floor.url, a.wrk_script, a.conns, a.seconds)
                u1, s1 = cpu_split(floor.pid)
                d["floor_us"] = (u1 - u0 + s1 - s0) * 1e6 / max(fl["decisions"], 1)
                d["floor_sys_us"] = (s1 - s0) * 1e6 / max(fl["decisions"], 1)
                d["floor_rate"] = fl["rate"]
            raw = self.window(lambda: self.redis_benchmark(
                self.call, a.conns, self.size(raw_rate, a.seconds)), self.cmd)
            mn = self.window(lambda: self.redis_benchmark(
                self.min_call, a.conns, self.size(min_rate, a.seconds / 2)), "evalsha")
            raw_rate, min_rate = raw["rate"], mn["rate"]
            peak.append((d, raw, mn))
            print(f"peak round {r + 1}: decisions/s daemon {d['rate']:.0f}, redis-benchmark "
                  f"{raw['rate']:.0f}, ratio {d['rate'] / raw['rate']:.2f}\n"
                  f"  usec_per_call admit {raw['usec_per_call']:.2f} (in the daemon's window "
                  f"{d['usec_per_call']:.2f}), minimal bucket {mn['usec_per_call']:.2f}, ratio "
                  f"{raw['usec_per_call'] / mn['usec_per_call']:.2f}\n"
                  f"  CPU us/decision daemon {d['daemon_us']:.1f} (system "
                  f"{d['daemon_sys_us']:.1f}), Redis {d['redis_us']:.1f} (in redis-benchmark's "
                  f"window {raw['redis_us']:.1f}), ratio {d['daemon_us'] / d['redis_us']:.2f}\n"
                  f"  HTTP floor (nginx, the daemon's answer from memory): {d['floor_rate']:.0f} "
                  f"requests/s, CPU us/request {d['floor_us']:.1f} (system "
                  f"{d['floor_sys_us']:.1f}), ratio to Redis's "
                  f"{d['floor_us'] / d['redis_us']:.2f}", flush=True)
            if abs(d["calls"] - d["decisions"]) > 0.02 * d["decisions"]:
                print(f"  warning: {d['calls']} script calls for {d['decisions']} decisions")
            warn_failed((("daemon", d), ("redis-benchmark admit", raw), ("minimal", mn)))

        half_target = statistics.median(d["rate"] for d, _, _ in peak) / 2
        conns = a.half_conns
        if not conns:
            for c in (1, 2, 3, 4, 6, 8, 12, 16, 24):
                conns = c
                if self.wrk(c, 2)["rate"] >= half_target:
                    break
        half = []
        for r in range(a.rounds):
            d = self.window(lambda: self.wrk(conns, a.seconds), self.cmd)
            rb_n = self.size(half[-1][1]["rate"] if half else raw_rate / 2, a.seconds)
            raw = self.window(lambda: self.redis_benchmark(self.call, conns, rb_n), self.cmd)
            half.append((d, raw))
            print(f"half round {r + 1} ({conns} connections): daemon {d['rate']:.0f}/s p50 "
                  f"{d['p50']:.0f} us p99 {d['p99']:.0f} us | redis-benchmark admit "
                  f"{raw['rate']:.0f}/s p50 {raw['p50']:.0f} us p99 {raw['p99']:.0f} us",
                  flush=True)

        mem = self.memory(a.memory_calls, a.conns)
        five = self.five() if a.five_body else []
        self.report(peak, half, conns, half_target, mem, five)
        if a.periods_body:
            self.periods()

    def periods(self):
        """Redis usec_per_call of the admit call of a plan with two quota periods beside the bench
        plan's (one), alternating windows of redis-benchmark -r; each round and the medians."""
        a = self.a
        cmds, calls, rid = capture([self.cli], a.http_port, a.periods_body)
        # The call's deadline (unix ms, seconds ahead of the capture) lifted: replayed later, a
        # call past it answers "past its deadline" having done nothing.
        now_ms = time.time() * 1000
        lift = lambda call: [NO_DEADLINE if re.fullmatch(r"\d{13}", x) and
                             abs(int(x) - now_ms) < 86400000 else x for x in call]
        one, two = lift(self.call), lift(replayable(calls[0], rid))
        once = [two[0]] + [x.replace(RAND, "7" * len(RAND)) for x in two[1:]]
        if self.redis(*once).split()[:1] != ["1"]:
            sys.exit("bench: the replayed two-period call does not admit: " + " ".join(two))
        n = self.size(self.redis_benchmark(one, a.conns, 20000)["rate"], a.seconds / 2)
        one_us, two_us = [], []
        for r in range(a.rounds):
            month = self.window(lambda: self.redis_benchmark(one, a.conns, n), self.cmd)
            both = self.window(lambda: self.redis_benchmark(two, a.conns, n), self.cmd)
            one_us.append(month["usec_per_call"])
            two_us.append(both["usec_per_call"])
            print(f"periods round {r + 1}: Redis usec_per_call month only {one_us[-1]:.2f}, "
                  f"day + month {two_us[-1]:.2f}, ratio {two_us[-1] / one_us[-1]:.2f}",
                  flush=True)
            warn_failed((("month only", month), ("day + month", both)))
        med = statistics.median
        print(f"\nQuota periods: {a.rounds} rounds of {n} calls at {a.conns} connections "
              f"(medians): Redis usec_per_call of admit.lua, month only (baseline) "
              f"{med(one_us):.2f}, day + month {med(two_us):.2f}, ratio "
              f"{med(t / o for t, o in zip(two_us, one_us)):.2f}")

    def five(self):
        """The five-gate rounds: (daemon, raw) windows; each window's Redis CPU is the sum of
        every EVALSHA's usec over the decisions."""
        a = self.a
        cmds, calls, rid = capture([self.cli], a.http_port, a.five_body)
        calls = [replayable(c, rid) for c in calls]
        print(f"five gates: the daemon's Redis commands for one admission: {len(cmds)} "
              f"({', '.join(c[0].upper() for c in cmds)}), {len(calls)} script calls")
        for c in calls:
            once = [c[0]] + [x.replace(RAND, "8" * len(RAND)) for x in c[1:]]
            if self.redis(*once).split()[:1] != ["1"]:
                sys.exit("bench: a replayed five-gate call does not admit: " + " ".join(c))
        body = {"DG_BODY": a.five_body}
        n = self.size(redis_benchmarks(self.rb, calls, a.conns, 5000)["rate"], a.seconds)
        rounds = []
        for r in range(a.rounds):
            d = self.window(lambda: wrk(self.url, a.wrk_script, a.conns, a.seconds, body),
                            "evalsha")
            raw = self.window(lambda: redis_benchmarks(self.rb, calls, a.conns, n), "evalsha")
            n = self.size(raw["rate"], a.seconds)
            for w in (d, raw):
                w["redis_call_us"] = w["usec_per_call"] * w["calls"] / max(w["decisions"], 1)
            rounds.append((d, raw))
            print(f"five-gate round {r + 1}: decisions/s daemon {d['rate']:.0f}, redis-benchmark "
                  f"{raw['rate']:.0f}, ratio {d['rate'] / raw['rate']:.2f}; Redis script us/"
                  f"decision {d['redis_call_us']:.1f} vs {raw['redis_call_us']:.1f}; CPU us/"
                  f"decision daemon {d['daemon_us']:.1f}, Redis {d['redis_us']:.1f}", flush=True)
            warn_failed((("daemon", d), ("redis-benchmark", raw)))
        return rounds

    def memory(self, n, conns):
        self.redis("flushall")
        self.redis(self.call[0], *[x.replace(RAND, "0" * len(RAND)) for x in self.call[1:]])
        m0, k0 = int(self.info("memory")["used_memory"]), int(self.redis("dbsize"))
        self.redis_benchmark(self.call, conns, n)
        m1, k1 = int(self.info("memory")["used_memory"]), int(self.redis("dbsize"))
        self.redis("flushall")
        return {"n": n, "bytes": (m1 - m0) / n, "keys": (k1 - k0) / n}

    def report(self, peak, half, conns, half_target, mem, five):
        a = self.a
        med = lambda xs: statistics.median(list(xs))
        ratios = [d["rate"] / raw["rate"] for d, raw, _ in peak]
        upc = [raw["usec_per_call"] / mn["usec_per_call"] for _, raw, mn in peak]
        cpu = [d["daemon_us"] / d["redis_us"] for d, _, _ in peak]
        floor = [d["floor_us"] / d["redis_us"] for d, _, _ in peak]
        own = [(d["daemon_us"] - d["floor_us"]) / d["redis_us"] for d, _, _ in peak]
        kernel = [d["daemon_sys_us"] / d["redis_us"] for d, _, _ in peak]
        rows = [
            (f"decisions/s, {a.conns} connections",
             med(raw["rate"] for _, raw, _ in peak), med(d["rate"] for d, _, _ in peak),
             med(ratios), ">= 0.8x", med(ratios) >= 0.8, "{:.0f}"),
            (f"p50 us, {conns} connections", med(r["p50"] for _, r in half),
             med(d["p50"] for d, _ in half),
             med(d["p50"] / r["p50"] for d, r in half), "", None, "{:.0f}"),
            (f"p99 us, {conns} connections", med(r["p99"] for _, r in half),
             med(d["p99"] for d, _ in half),
             med(d["p99"] / r["p99"] for d, r in half), "daemon <= 1000 us",
             med(d["p99"] for d, _ in half) <= 1000, "{:.0f}"),
            ("Redis usec_per_call (min bucket | admit)", med(mn["usec_per_call"] for *_, mn in peak),
             med(raw["usec_per_call"] for _, raw, _ in peak), med(upc), "<= 2.0x",
             med(upc) <= 2.0, "{:.2f}"),
            ("CPU us/decision (Redis | daemon)", med(d["redis_us"] for d, _, _ in peak),
             med(d["daemon_us"] for d, _, _ in peak), med(cpu), "<= 0.5x", med(cpu) <= 0.5,
             "{:.1f}"),
            ("daemon's system CPU us/decision (Redis | d.)", med(d["redis_us"] for d, _, _ in peak),
             med(d["daemon_sys_us"] for d, _, _ in peak), med(kernel), "", None, "{:.1f}"),
            ("nginx's system CPU us/request (Redis | n.)", med(d["redis_us"] for d, _, _ in peak),
             med(d["floor_sys_us"] for d, _, _ in peak),
             med(d["floor_sys_us"] / d["redis_us"] for d, _, _ in peak), "", None, "{:.1f}"),
            ("CPU us/request, HTTP floor (Redis | nginx)", med(d["redis_us"] for d, _, _ in peak),
             med(d["floor_us"] for d, _, _ in peak), med(floor), "", None, "{:.1f}"),
            ("CPU us/decision above floor (Redis | daemon)",
             med(d["redis_us"] for d, _, _ in peak),
             med(d["daemon_us"] - d["floor_us"] for d, _, _ in peak), med(own), "", None,
             "{:.1f}"),
            (f"Redis bytes/open reservation, N={mem['n']}", None, mem["bytes"], None, "<= 100 B",
             mem["bytes"] <= 100, "{:.0f}"),
        ]
        five_ratios = [d["rate"] / raw["rate"] for d, raw in five]
        if five:
            rows += [
                (f"five gates: decisions/s, {a.conns} conns", med(raw["rate"] for _, raw in five),
                 med(d["rate"] for d, _ in five), med(five_ratios), ">= 0.8x",
                 med(five_ratios) >= 0.8, "{:.0f}"),
                ("five gates: Redis script us/decision", med(r["redis_call_us"] for _, r in five),
                 med(d["redis_call_us"] for d, _ in five),
                 med(d["redis_call_us"] / r["redis_call_us"] for d, r in five), "", None,
                 "{:.1f}"),
                ("five gates: CPU us/decision (Redis | daemon)",
                 med(d["redis_us"] for d, _ in five), med(d["daemon_us"] for d, _ in five),
                 med(d["daemon_us"] / d["redis_us"] for d, _ in five), "", None, "{:.1f}"),
            ]
        print(f"\nAdmission benchmark: {a.rounds} rounds of {a.seconds} s, daemon "
              f"{a.threads} worker thread(s), Redis over "
              f"{'a unix socket' if a.redis_socket else 'TCP'}; medians over the rounds, "
              "ratio = median of the rounds' ratios")
        print(f"({os.popen('uptime').read().strip()})")
        head = f"| {'figure':<44} | {'baseline':>9} | {'dripgate':>9} | {'ratio':>6} | target"
        print(head)
        print("|" + "-" * 46 + "|" + "-" * 11 + "|" + "-" * 11 + "|" + "-" * 8 + "|" + "-" * 22)
        for name, base, dg, ratio, target, met, fmt in rows:
            cell = lambda v, f=fmt: f.format(v) if v is not None else "-"
            mark = "" if met is None else (" (met)" if met else " (not met)")
            print(f"| {name:<44} | {cell(base):>9} | {cell(dg):>9} | "
                  f"{cell(ratio, '{:.2f}x'):>6} | {target}{mark}")
        print()
        print("decisions/s ratio by round: " + " ".join(f"{x:.2f}" for x in ratios))
        print("usec_per_call ratio by round: " + " ".join(f"{x:.2f}" for x in upc))
        print("CPU/decision ratio by round: " + " ".join(f"{x:.2f}" for x in cpu))
        print("daemon system CPU/decision ratio by round: " + " ".join(f"{x:.2f}" for x in kernel))
        print("HTTP floor CPU/request ratio by round: " + " ".join(f"{x:.2f}" for x in floor))
        if five:
            print("five-gate decisions/s ratio by round: " +
                  " ".join(f"{x:.2f}" for x in five_ratios))
        print(f"baselines: redis-benchmark -r sending the daemon's admit call (decisions/s, "
              f"latency); the minimal bucket script (HMGET, TIME, HSET, EXPIRE) for "
              f"usec_per_call; Redis's CPU in the daemon's windows for CPU/decision; the HTTP "
              f"floor is nginx answering the daemon's answer from memory under the same wrk "
              f"(one read and one send per request: the kernel's share of any HTTP/1.1 server)")
        print(f"half peak: {half_target:.0f}/s wanted, closed loop at {conns} connections "
              f"(wrk and redis-benchmark alike); memory: {mem['keys']:.2f} keys per admission")


def arguments(doc):
    """The flags Bench needs (the script starts Redis and the daemon and passes them on)."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--redis-port", type=int, default=0)
    p.add_argument("--redis-socket", default="")
    p.add_argument("--redis-pid", type=int, required=True)
    p.add_argument("--daemon-pid", type=int, required=True)
    p.add_argument("--http-port", type=int, required=True)
    p.add_argument("--wrk-script", required=True)
    p.add_argument("--body", default='{"tenant":"ws-bench","tokens":1}')
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--conns", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    return p


def main():
    p = arguments(__doc__)
    p.add_argument("--half-conns", type=int, default=0)
    p.add_argument("--work-dir", required=True, help="where the HTTP floor's nginx keeps its files")
    p.add_argument("--memory-calls", type=int, default=100000)
    p.add_argument("--five-body", default="", help="the five-gate request; empty: not measured")
    p.add_argument("--periods-body", default="",
                   help="a request on a plan with two quota periods; empty: not measured")
    p.add_argument("--periods-only", action="store_true", help="measure the periods alone")
    b = Bench(p.parse_args())
    if b.a.periods_only:
        b.capture()
        b.periods()
    else:
        b.run()


if __name__ == "__main__":
    main()
