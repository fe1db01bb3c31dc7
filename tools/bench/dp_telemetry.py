#!/usr/bin/env python3
"""Reads DPDK telemetry of a running process (dpdk-testpmd or dripgate-dataplane) straight from
its socket, so both are measured the same way.

  dp_telemetry.py rate --prefix P --ports 0,1 --warmup 2 --seconds 10
      waits for the socket, sleeps `warmup`, samples /ethdev/stats,N for every port, sleeps
      `seconds`, samples again; prints JSON: per-port opackets/s and ipackets/s and the total.
      With --pid, also the on-CPU nanoseconds of the process's worker lcore thread (rte-worker-N,
      N = --lcore; /proc/<pid>/task/<tid>/schedstat) per packet sent in the same window.
  dp_telemetry.py get --prefix P CMD...
      prints the JSON answer of each command.
"""
import argparse
import json
import os
import socket
import sys
import time


def connect(prefix, timeout, proc=None):
    """The DPDK process's telemetry socket, once it accepts; RuntimeError after `timeout` s, or
    as soon as `proc` (a subprocess.Popen, when given) has exited."""
    path = os.path.join("/var/run/dpdk", prefix, "dpdk_telemetry.v2")
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before its telemetry socket")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            s.connect(path)
            json.loads(s.recv(65536).decode())  # the greeting
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"no telemetry socket at {path}")
            time.sleep(0.1)


def query(s, cmd):
    s.send(cmd.encode())
    return json.loads(s.recv(1 << 20).decode())


def sample(s, ports):
    t = time.monotonic()
    stats = {p: query(s, f"/ethdev/stats,{p}")["/ethdev/stats"] for p in ports}
    return t, stats


def worker_thread(pid, lcore, timeout):
    """The schedstat path of pid's thread of worker lcore `lcore` (DPDK names it)."""
    deadline = time.monotonic() + timeout
    while True:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    if f.read().strip() == f"rte-worker-{lcore}":
                        return f"/proc/{pid}/task/{tid}/schedstat"
            except OSError:
                pass
        if time.monotonic() > deadline:
            sys.exit(f"dp_telemetry: no rte-worker-{lcore} thread in process {pid}")
        time.sleep(0.1)


def on_cpu_ns(path):
    with open(path) as f:
        return int(f.read().split()[0])


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("rate")
    r.add_argument("--prefix", required=True)
    r.add_argument("--ports", default="0,1")
    r.add_argument("--warmup", type=float, default=2)
    r.add_argument("--seconds", type=float, default=10)
    r.add_argument("--timeout", type=float, default=30)
    r.add_argument("--pid", type=int, default=0)
    r.add_argument("--lcore", type=int, default=1)
    g = sub.add_parser("get")
    g.add_argument("--prefix", required=True)
    g.add_argument("--timeout", type=float, default=30)
    g.add_argument("cmd", nargs="+")
    a = ap.parse_args()
    try:
        s = connect(a.prefix, a.timeout)
    except RuntimeError as e:
        sys.exit(f"dp_telemetry: {e}")
    if a.what == "get":
        for c in a.cmd:
            print(json.dumps(query(s, c)))
        return
    ports = [int(p) for p in a.ports.split(",")]
    time.sleep(a.warmup)
    worker = worker_thread(a.pid, a.lcore, a.timeout) if a.pid else None
    c0 = on_cpu_ns(worker) if worker else 0
    t0, s0 = sample(s, ports)
    time.sleep(a.seconds)
    t1, s1 = sample(s, ports)
    c1 = on_cpu_ns(worker) if worker else 0
    dt = t1 - t0
    out = {"seconds": dt, "ports": {}}
    total = 0.0
    for p in ports:
        opps = (s1[p]["opackets"] - s0[p]["opackets"]) / dt
        ipps = (s1[p]["ipackets"] - s0[p]["ipackets"]) / dt
        out["ports"][p] = {"opackets_per_s": opps, "ipackets_per_s": ipps,
                           "oerrors": s1[p]["oerrors"] - s0[p]["oerrors"]}
        total += opps
    out["total_opackets_per_s"] = total
    if worker:
        out["worker_ns_per_packet"] = (c1 - c0) / max(total * dt, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
