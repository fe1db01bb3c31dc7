#!/usr/bin/env python3
"""Idle clients for tools/chaos.sh, and whether a legitimate client still gets an answer.

  idle.py tcp --port P --conns N --hold S --pid PID --log FILE
      opens N TCP connections to dripgate-control that never send a byte, then for S seconds
      keeps N open (each one the daemon closes is opened again, as a flood would) and sends one
      POST /v1/admit a second on a new connection (each on its own thread, given until the end
      of the hold to answer); measures the daemon's CPU time (PID) and the growth of its log
      (FILE) over the hold.
  idle.py unix --path SOCK --conns N --hold S
      opens N idle clients on dripgate-dataplane's control socket, then a new client retries
      to connect and asks {"op":"stats"} until it is answered or the hold ends.

Both print one JSON object; how many idle clients the daemon closed is counted at the end.
More TCP connections than one process may open are spread over several processes.
"""
import argparse
import ctypes
import errno
import json
import multiprocessing
import os
import resource
import selectors
import signal
import socket
import threading
import time
from collections import Counter

PR_SET_PDEATHSIG = 1
ADMIT = (b"POST /v1/admit HTTP/1.1\r\nHost: chaos\r\nConnection: close\r\n"
         b"Content-Type: application/json\r\nContent-Length: 32\r\n\r\n"
         b'{"tenant":"ws-chaos","tokens":1}')


def open_idle(family, address, n, wait_s):
    """n non-blocking connects at once; returns (connected sockets, failures by kind). A unix
    socket whose backlog is full (EAGAIN) is tried again every 10 ms; connects still pending
    wait_s after the last one was made count as timeouts (making 20,000 connects can itself take
    longer than that on a loaded machine)."""
    sel = selectors.DefaultSelector()
    failed = Counter()
    done, retry = [], []
    deadline = time.monotonic() + wait_s
    todo = n
    while todo and time.monotonic() < deadline:
        for _ in range(todo):
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setblocking(False)
            rc = s.connect_ex(address)
            if rc == 0:
                done.append(s)
            elif rc == errno.EINPROGRESS:
                sel.register(s, selectors.EVENT_WRITE)
            elif rc == errno.EAGAIN and family == socket.AF_UNIX:
                retry.append(s)
            else:
                failed[errno.errorcode.get(rc, str(rc))] += 1
                s.close()
        todo = len(retry)
        for s in retry:
            s.close()
        retry = []
        if todo:
            time.sleep(0.01)
    if todo:
        failed["EAGAIN until the end"] = todo
    pending = len(sel.get_map())
    deadline = time.monotonic() + wait_s
    while pending and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=max(0, deadline - time.monotonic())):
            s = key.fileobj
            sel.unregister(s)
            pending -= 1
            rc = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if rc == 0:
                done.append(s)
            else:
                failed[errno.errorcode.get(rc, str(rc))] += 1
                s.close()
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    if pending:
        failed["connect timeout"] = pending
    return done, failed


def peer_closed(s):
    """Whether the peer has closed s (whatever it sent before is read and dropped)."""
    try:
        while s.recv(65536, socket.MSG_DONTWAIT):
            pass
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def closed_by_peer(socks):
    """How many of socks the peer has closed."""
    return sum(peer_closed(s) for s in socks)


def keep_open(socks, address, until):
    """Holds socks until until.value (time.time(); 0 while not yet known), opening a new idle
    connection for each one the peer closes; returns how many the peer closed."""
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    closed = 0
    while (left := (until.value or time.time() + 1) - time.time()) > 0:
        gone = [key.fileobj for key, _ in sel.select(timeout=min(left, 0.2))
                if peer_closed(key.fileobj)]
        for s in gone:
            sel.unregister(s)
            s.close()
        closed += len(gone)
        if gone:
            again, _ = open_idle(socket.AF_INET, address, len(gone), min(left, 1))
            for s in again:
                sel.register(s, selectors.EVENT_READ)
    return closed + closed_by_peer([key.fileobj for key in sel.get_map().values()])


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def probe_http(port, deadline):
    """One POST /v1/admit on a new connection: (status or failure kind, seconds)."""
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=max(0.1, deadline - t0)) as s:
            s.sendall(ADMIT)
            data = b""
            while b"\r\n" not in data:
                s.settimeout(max(0.1, deadline - time.monotonic()))
                chunk = s.recv(4096)
                if not chunk:
                    return "closed", time.monotonic() - t0
                data += chunk
            return int(data.split()[1]), time.monotonic() - t0
    except socket.timeout:
        return "timeout", time.monotonic() - t0
    except OSError as e:
        return errno.errorcode.get(e.errno, "error"), time.monotonic() - t0


def hold_share(port, n, deadline, pipe_w):
    """A child's part of the idle connections: opens n, reports (opened, failures) on the pipe,
    keeps n open until deadline, then reports how many the daemon closed."""
    # Dies with its parent (killed, Ctrl-C) instead of holding the connections forever.
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    # A connect lost to a full accept queue is retried by the kernel (SYN after 1, 3, 7, 15 s).
    socks, failed = open_idle(socket.AF_INET, ("127.0.0.1", port), n, 20)
    os.write(pipe_w, (json.dumps({"opened": len(socks), "failed": failed}) + "\n").encode())
    # The deadline is set by the parent once every share is open; the flood is kept up until then.
    closed = keep_open(socks, ("127.0.0.1", port), deadline)
    os.write(pipe_w, (json.dumps({"closed": closed}) + "\n").encode())


def tcp(args):
    # One process holds fewer connections than its open-file limit allows (raised to the hard
    # limit); more connections are spread over several processes.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    per = max(1, hard - 256)
    shares = [min(per, args.conns - i) for i in range(0, args.conns, per)]
    deadline = multiprocessing.Value("d", 0.0)
    pipes, children = [], []
    for n in shares:
        r, w = os.pipe()
        c = multiprocessing.Process(target=hold_share, args=(args.port, n, deadline, w))
        c.start()
        os.close(w)
        pipes.append(os.fdopen(r))
        children.append(c)
    opened, failed = 0, Counter()
    for p in pipes:
        ready = json.loads(p.readline())
        opened += ready["opened"]
        failed.update(ready["failed"])
    cpu0, log0, t0 = cpu_s(args.pid), os.path.getsize(args.log), time.monotonic()
    end = t0 + args.hold
    deadline.value = time.time() + args.hold
    # One legitimate request a second, each on its own thread and given until the end.
    probes, threads = [], []
    while time.monotonic() < end - 0.5:
        start = time.monotonic()
        t = threading.Thread(target=lambda: probes.append(probe_http(args.port, end)))
        t.start()
        threads.append(t)
        time.sleep(max(0, start + 1 - time.monotonic()))
    for t in threads:
        t.join()
    time.sleep(max(0, end - time.monotonic()))
    t1 = time.monotonic()
    cpu, log = cpu_s(args.pid) - cpu0, os.path.getsize(args.log) - log0
    closed = sum(json.loads(p.readline())["closed"] for p in pipes)
    for c in children:
        c.join()
    print(json.dumps({"opened": opened, "failed": failed, "hold_s": t1 - t0, "cpu_s": cpu,
                      "log_bytes": log, "probes": probes, "closed_by_peer": closed}))


def stats_client(path, deadline):
    """A new client that retries (every 0.2 s) until it can connect and gets an "ok":true
    answer: (answered, attempts refused or not answered, last refusal, seconds)."""
    t0 = time.monotonic()
    refused, last = 0, ""
    while time.monotonic() < deadline:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        rc = s.connect_ex(path)
        data = b""
        if rc == 0:
            s.setblocking(True)
            try:
                s.sendall(b'{"op":"stats"}\n')
                while b"\n" not in data:
                    s.settimeout(max(0.05, deadline - time.monotonic()))
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                pass
        s.close()
        line = data.split(b"\n")[0].decode(errors="replace")
        if b"\n" in data and '"ok":true' in line:
            return True, refused, last, time.monotonic() - t0
        refused += 1
        last = line or (errno.errorcode.get(rc, str(rc)) if rc else "no answer")
        time.sleep(0.2)
    return False, refused, last, time.monotonic() - t0


def unix(args):
    socks, failed = open_idle(socket.AF_UNIX, args.path, args.conns, 3)
    time.sleep(0.5)
    busy = closed_by_peer(socks)  # accepted, then closed at once (a client limit)
    t0 = time.monotonic()
    end = t0 + args.hold
    answered, refused, last, waited = stats_client(args.path, end)
    # Once one client got through, a second one right after: is the way in still open?
    second = stats_client(args.path, min(end, time.monotonic() + 2)) if answered else None
    time.sleep(max(0, end - time.monotonic()))
    out = {"opened": len(socks), "failed": failed, "hold_s": time.monotonic() - t0,
           "answered": answered, "refused": refused, "last_refusal": last, "waited_s": waited,
           "second_answered": bool(second and second[0]), "second_s": second[3] if second else 0,
           "closed_at_once": busy, "closed_by_peer": closed_by_peer(socks) - busy}
    print(json.dumps(out))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("tcp")
    t.add_argument("--port", type=int, required=True)
    t.add_argument("--pid", type=int, required=True)
    t.add_argument("--log", required=True)
    u = sub.add_parser("unix")
    u.add_argument("--path", required=True)
    for p in (t, u):
        p.add_argument("--conns", type=int, required=True)
        p.add_argument("--hold", type=float, default=10)
    a = ap.parse_args()
    tcp(a) if a.mode == "tcp" else unix(a)
