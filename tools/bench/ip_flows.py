#!/usr/bin/env python3
"""IP traffic for dp_throughput.sh's ip-flows scenario (net_null frames are all zeroes, not IP).

  ip_flows.py pcap FILE   writes 1024 UDP flows, one 64-byte frame each, alternating between
                          10.1.0.0/16 (the benchmark's classify rule: gold) and 10.2.0.0/16
                          (no rule: unknown_flows default)
  ip_flows.py tag SOCK    waits for the dataplane's control socket and tags every other
                          10.2 flow into gold (256 flow-table entries), so a quarter of the
                          packets are classified by the flow table, half by the rule and a
                          quarter fall through to default
  ip_flows.py tag SOCK --tenants N
                          tags all 1024 flows into gold instead, flow i for tenant t<i mod N>:
                          one class shared by N tenants (the fairness comparison)
"""
import json
import os
import socket
import struct
import sys
import time

FLOWS = 1024
FRAME = 64


def src_of(i):
    return (10, 1 if i % 2 == 0 else 2, (i >> 8) & 0xFF, i & 0xFF)


def checksum(b):
    s = sum((b[i] << 8) | b[i + 1] for i in range(0, len(b), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def write_pcap(path):
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i in range(FLOWS):
            total = FRAME - 14
            # IP ID = the flow's number.
            ip = bytearray(struct.pack("!BBHHHBBH4B4B", 0x45, 0, total, i, 0, 64, 17, 0,
                                       *src_of(i), 10, 9, 0, 1))
            ip[10:12] = struct.pack("!H", checksum(ip))
            udp = struct.pack("!HHHH", 10000 + i, 8080, total - 20, 0)
            frame = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0]) + bytes(ip) + udp
            frame += bytes(FRAME - len(frame))
            out.write(struct.pack("<IIII", 0, i, len(frame), len(frame)) + frame)


def tag(sock_path, tenants=0):
    deadline = time.time() + 30
    while not os.path.exists(sock_path):
        if time.time() > deadline:
            sys.exit(f"ip_flows.py: no control socket at {sock_path}")
        time.sleep(0.05)
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock_path)
    f = s.makefile("rw")
    for i in range(0, FLOWS, 1) if tenants else range(1, FLOWS, 4):
        flow = {"src": "%d.%d.%d.%d" % src_of(i), "sport": 10000 + i, "dst": "10.9.0.1",
                "dport": 8080, "proto": 17}
        line = {"op": "tag", "flow": flow, "class": "gold", "ttl_s": 3600}
        if tenants:
            line["tenant"] = f"t{i % tenants}"
        f.write(json.dumps(line) + "\n")
        f.flush()
        answer = json.loads(f.readline())
        if not answer.get("ok"):
            sys.exit(f"ip_flows.py: tag refused: {answer}")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["pcap"] and len(args) == 2:
        write_pcap(args[1])
    elif args[:1] == ["tag"] and len(args) == 2:
        tag(args[1])
    elif args[:1] == ["tag"] and len(args) == 4 and args[2] == "--tenants" and args[3].isdigit():
        tag(args[1], int(args[3]))
    else:
        sys.exit(__doc__)
