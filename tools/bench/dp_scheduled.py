#!/usr/bin/env python3
"""Input and measurement for dp_scheduled.sh: dripgate-dataplane and DPDK's qos_sched example,
one shaped port, three classes sharing it by weight 4:2:1.

  dp_scheduled.py pcap FILE
      writes 1023 IPv4/UDP flows, one 64-byte frame each, the three classes interleaved frame
      by frame (341 flows each): flow i is class i % 3. dripgate classifies by destination
      (10.9.1.0/24 gold, 10.9.2.0/24 silver, 10.9.3.0/24 default); qos_sched reads the frame's
      byte 41 (app_thread.c: pdata[QUEUE_OFFSET] >> 8, the last byte of the destination
      address in the double-VLAN frames it was written for, the UDP checksum's low byte in an
      untagged one) and takes best-effort queue byte % 4. Each frame's checksum is a true one
      whose low byte is its class (0, 1, 2 mod 4): two payload bytes make it so.
  dp_scheduled.py run --prefix P --warmup W --seconds S --kind qos_sched|dripgate [--log F] -- CMD...
      starts CMD (a DPDK process with telemetry prefix P), waits for its telemetry socket,
      lets it run W seconds, then counts over S seconds: packets out of port 1 and into port 0
      (ethdev stats) and each class's departures, from the scheduler's own counters:
      dripgate's /dripgate/classes tx_pkts, qos_sched's `stats port 1 subport 0 pipe 0`
      (interactive mode, on its stdin; rte_sched counts a queue's packets when they enter, and
      reading clears the count, so a queue's departures are its entries less its growth).
      Stops CMD (SIGTERM) and prints one JSON line: {"out_pps", "in_pps", "classes":
      [departures/s of class 0, 1, 2], "shares": [of what left], "off": the largest distance
      in percentage points between a class's share and its weight's (4/7, 2/7, 1/7),
      "tail_drops": [per class, /s], "qlen": [at the end]}. A third of the input is in each
      class, so the shares come out 4:2:1 only when every queue stays backlogged: a class that
      runs dry gets what it brought and leaves its unused share to the others (work
      conservation), class 0 first, as it brings a third and is owed four sevenths.
"""
import argparse
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time

import dp_telemetry  # beside this script

FLOWS = 1023
FRAME = 64
CLASSES = 3
DP_CLASSES = ("gold", "silver", "default")  # dripgate's names, queue 0, 1, 2 of qos_sched's
WEIGHTS = (4, 2, 1)  # both configs


def csum16(b):
    if len(b) % 2:
        b += b"\0"
    s = sum((b[i] << 8) | b[i + 1] for i in range(0, len(b), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def frame(i):
    cls = i % CLASSES
    src = bytes((10, 1, (i >> 8) & 0xFF, i & 0xFF))
    dst = bytes((10, 9, cls + 1, 1))
    total = FRAME - 14
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, i, 0, 64, 17, 0, src, dst))
    ip[10:12] = struct.pack("!H", csum16(bytes(ip)))
    udp_len = total - 20
    for adj in range(65536):
        payload = struct.pack("!H", adj) + bytes(udp_len - 8 - 2)
        udp = struct.pack("!HHHH", 10000 + i, 8080, udp_len, 0) + payload
        c = csum16(src + dst + struct.pack("!BBH", 0, 17, udp_len) + udp) or 0xFFFF
        if (c & 0xFF) % 4 == cls:
            break
    udp = udp[:6] + struct.pack("!H", c) + udp[8:]
    f = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0]) + bytes(ip) + udp
    assert len(f) == FRAME and f[41] % 4 == cls
    return f


def write_pcap(path):
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i in range(FLOWS):
            f = frame(i)
            out.write(struct.pack("<IIII", 0, i, len(f), len(f)) + f)


def query(s, cmd):
    s.send(cmd.encode())
    answer = json.loads(s.recv(1 << 20).decode())
    return answer[cmd.split(",")[0]]


class QosSchedStats:
    """qos_sched's per-queue table, asked for on its stdin, read from its log."""
    ROW = re.compile(r"^\|\s+12\s+\|\s+(\d)\s+\|\s+(\d+)\s+\|\s+(\d+)\s+\|\s+(\d+)\s+\|\s+(\d+)\s+\|\s+(\d+)\s+\|")

    def __init__(self, proc, log):
        self.proc, self.log = proc, log

    def sample(self):
        start = os.path.getsize(self.log)
        self.proc.stdin.write(b"stats port 1 subport 0 pipe 0\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with open(self.log, "rb") as f:
                f.seek(start)
                rows = {}
                for line in f.read().decode(errors="replace").splitlines():
                    m = self.ROW.match(line)
                    if m:
                        rows[int(m.group(1))] = (int(m.group(2)), int(m.group(6)),
                                                 int(m.group(3)))
            if len(rows) == 4:
                # (entered since the last read, length, dropped since the last read)
                return [rows[q] for q in range(CLASSES)]
            time.sleep(0.02)
        raise RuntimeError("qos_sched printed no pipe stats table")


def run(a, cmd):
    log = open(a.log, "wb")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT)
    try:
        s = dp_telemetry.connect(a.prefix, 30, proc)
        qos = QosSchedStats(proc, a.log) if a.kind == "qos_sched" else None

        def sample():
            t = time.monotonic()
            if qos:
                per = qos.sample()
            else:
                per = []
                for name in DP_CLASSES:
                    c = query(s, f"/dripgate/classes,{name}")
                    per.append((c["tx_pkts"], c["queue_len"], c["drop_depth"]))
            ports = {p: query(s, f"/ethdev/stats,{p}") for p in (0, 1)}
            return t, per, ports

        time.sleep(a.warmup)
        t0, c0, p0 = sample()
        time.sleep(a.seconds)
        t1, c1, p1 = sample()
        dt = t1 - t0
        if qos:  # the counts were cleared at t0: entries since, less what stayed queued
            dep = [(c1[k][0] - (c1[k][1] - c0[k][1])) / dt for k in range(CLASSES)]
            drops = [c1[k][2] / dt for k in range(CLASSES)]
        else:
            dep = [(c1[k][0] - c0[k][0]) / dt for k in range(CLASSES)]
            drops = [(c1[k][2] - c0[k][2]) / dt for k in range(CLASSES)]
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} during the window")
        shares = [d / (sum(dep) or 1) for d in dep]
        off = max(abs(x - w / sum(WEIGHTS)) for x, w in zip(shares, WEIGHTS)) * 100
        print(json.dumps({"out_pps": (p1[1]["opackets"] - p0[1]["opackets"]) / dt,
                          "in_pps": (p1[0]["ipackets"] - p0[0]["ipackets"]) / dt,
                          "classes": dep, "shares": shares, "off": off, "tail_drops": drops,
                          "qlen": [c[1] for c in c1]}))
    except Exception as e:
        log.flush()
        with open(a.log, errors="replace") as f:
            tail = f.read()[-3000:]
        sys.exit(f"dp_scheduled.py: {a.kind}: {e}\n{tail}")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
    if a.kind == "dripgate" and proc.returncode != 0:
        sys.exit(f"dp_scheduled.py: dripgate-dataplane exited with {proc.returncode}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "pcap":
        write_pcap(sys.argv[2])
        return
    if len(sys.argv) < 2 or sys.argv[1] != "run" or "--" not in sys.argv:
        sys.exit(__doc__)
    split = sys.argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--warmup", type=float, default=2)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--kind", choices=("qos_sched", "dripgate"), required=True)
    ap.add_argument("--log", required=True)
    run(ap.parse_args(sys.argv[2:split]), sys.argv[split + 1:])


if __name__ == "__main__":
    main()
