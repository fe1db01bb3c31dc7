#!/usr/bin/env python3
"""Closed-loop HTTP load for tools/chaos.sh: N keep-alive clients POST /v1/admit for S seconds.

Every request is recorded as (start, end, outcome), where outcome is the HTTP status, or
"connect" (the TCP connection could not be made), "timeout" (no full answer within the client
timeout) or "closed" (the daemon closed the connection before answering). A failed connection
is dropped and made again; nothing waits between requests. The records go to --out as JSON, for
`report.py load`.

  load.py --port P [--clients 32] [--seconds 15] [--timeout 2] --out FILE
"""
import argparse
import asyncio
import json
import time

BODY = b'{"tenant":"ws-chaos","tokens":1}'


def request_bytes(port):
    return (b"POST /v1/admit HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (port, len(BODY), BODY))


async def read_answer(reader):
    """(status, whether the daemon closes the connection) of one HTTP/1.1 answer; its body is
    read and dropped."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length, close = 0, False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"connection":
            close = value.strip().lower() == b"close"
    if length:
        await reader.readexactly(length)
    return status, close


async def client(port, until, timeout, records):
    req = request_bytes(port)
    reader = writer = None
    while time.monotonic() < until:
        t0 = time.monotonic()
        outcome = None
        if writer is None:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port), timeout)
            except asyncio.TimeoutError:
                outcome = "timeout"
            except OSError:
                outcome = "connect"
            if outcome:
                records.append((t0, time.monotonic(), outcome))
                await asyncio.sleep(0.01)  # a refused connect returns at once: do not spin
                continue
        close = True
        try:
            writer.write(req)
            outcome, close = await asyncio.wait_for(read_answer(reader), timeout)
        except asyncio.TimeoutError:
            outcome = "timeout"
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ValueError, IndexError):
            outcome = "closed"
        records.append((t0, time.monotonic(), outcome))
        if close:
            writer.close()
            reader = writer = None


async def main(args):
    records = []
    start = time.monotonic()
    wall = time.time()
    until = start + args.seconds
    await asyncio.gather(*(client(args.port, until, args.timeout, records)
                           for _ in range(args.clients)))
    # Times relative to the start, in the wall clock that tools/chaos.sh stamps its events with.
    out = {"wall_start": wall, "clients": args.clients, "seconds": args.seconds,
           "timeout": args.timeout,
           "records": [(round(a - start, 6), round(b - start, 6), o) for a, b, o in records]}
    with open(args.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--timeout", type=float, default=2)
    ap.add_argument("--out", required=True)
    asyncio.run(main(ap.parse_args()))
