#!/usr/bin/env python3
"""Tagging load on dripgate-dataplane's control socket, for dp_tagging.sh.

  dp_tagging.py burst SOCK --flows N --batch B
      tags N flows as fast as the socket takes them: a writer thread pipelines the lines (B flows
      per line: B = 1 is {"op":"tag","flow":...}, B > 1 is {"op":"tag","flows":[...]}) while the
      main thread reads the answers; prints JSON {"lines_per_s", "flows_per_s", "errors"}.
  dp_tagging.py steady SOCK --rate R --seconds S
      tags R flows per second (one per line, pipelined, sent every millisecond) for S seconds;
      prints JSON {"flows_per_s", "errors"}.
The flows are 172.16.0.0/12 UDP 5-tuples (none of dp_throughput.sh's ip-flows traffic), tagged
into "gold" for 60 s; a later run re-tags the same ones.
"""
import argparse
import json
import socket
import threading
import time


def flow(i):
    return {"src": "172.%d.%d.%d" % (16 + (i >> 16) % 16, (i >> 8) & 0xFF, i & 0xFF),
            "sport": 20000 + i % 40000, "dst": "10.9.0.1", "dport": 8080, "proto": 17}


def line(first, count):
    if count == 1:
        req = {"op": "tag", "flow": flow(first), "class": "gold", "ttl_s": 60}
    else:
        req = {"op": "tag", "flows": [flow(first + k) for k in range(count)], "class": "gold",
               "ttl_s": 60}
    return (json.dumps(req, separators=(",", ":")) + "\n").encode()


def connect(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return s


def read_answers(s, lines):
    """Reads `lines` answers; returns how many were not ok."""
    f = s.makefile("rb")
    errors = 0
    for _ in range(lines):
        a = f.readline()
        if not a:
            raise SystemExit("dp_tagging: the dataplane closed the connection")
        if b'"ok":true' not in a:
            errors += 1
    return errors


def burst(args):
    lines = [line(i, args.batch) for i in range(0, args.flows, args.batch)]
    s = connect(args.sock)
    start = time.monotonic()
    writer = threading.Thread(target=lambda: s.sendall(b"".join(lines)))
    writer.start()
    errors = read_answers(s, len(lines))
    secs = time.monotonic() - start
    writer.join()
    print(json.dumps({"lines_per_s": len(lines) / secs, "flows_per_s": args.flows / secs,
                      "errors": errors}))


def steady(args):
    s = connect(args.sock)
    total = int(args.rate * args.seconds)
    counted = {}
    reader = threading.Thread(target=lambda: counted.update(errors=read_answers(s, total)))
    reader.start()
    start = time.monotonic()
    sent = 0
    while sent < total:
        due = min(total, int((time.monotonic() - start) * args.rate) + 1)
        if due > sent:
            s.sendall(b"".join(line(i % 65536, 1) for i in range(sent, due)))
            sent = due
        time.sleep(0.001)
    reader.join()
    secs = time.monotonic() - start
    print(json.dumps({"flows_per_s": total / secs, "errors": counted["errors"]}))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("burst")
    b.add_argument("sock")
    b.add_argument("--flows", type=int, default=20000)
    b.add_argument("--batch", type=int, default=1)
    st = sub.add_parser("steady")
    st.add_argument("sock")
    st.add_argument("--rate", type=float, default=20000)
    st.add_argument("--seconds", type=float, default=10)
    args = p.parse_args()
    (burst if args.cmd == "burst" else steady)(args)


if __name__ == "__main__":
    main()
