#!/usr/bin/env python3
"""A key rotation under load, for tools/chaos.sh's `rotate`: control.auth tenant_keys, one
registry tenant, keep-alive clients POSTing /v1/admit with its key the whole time.

The tenant is put on a plan and given key A over the admin API; 3 s in, the key is rotated to B
with an overlap of --overlap-s seconds (A stays valid until then); halfway through the overlap
the clients move to B, but one client keeps sending A to the end. Every answer is recorded with
the key it carried and when it was sent, then counted against what the rotation promised:

  * A before its overlap ends, B from when the clients moved: no request refused for its key
    (401 or 403);
  * A after the overlap (plus a poll's margin): every request refused (401), none admitted.

Answers of another kind (a Redis timeout's 503) are counted apart, by status.

Prints the report's table (report.table) and exits 0 either way: chaos.sh measures, it does not
judge.

  rotate.py --port P --admin-token T [--clients 8] [--seconds 15] [--overlap-s 6]
"""
import argparse
import hashlib
import http.client
import json
import threading
from collections import Counter
import time

from report import table

TENANT = "ws-rotate"
KEY_A = "chaos-rotate-key-a"
KEY_B = "chaos-rotate-key-b"
# How long a change takes to reach the daemon's copy of the registry (its poll, 100 ms) and
# how far apart the clocks here and in the daemon may read a second: answers that close to an
# edge are not counted either way.
MARGIN_S = 0.5


def digest(key):
    return hashlib.sha256(key.encode()).hexdigest()


def call(port, method, path, body, token):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request(method, path, json.dumps(body), {"Authorization": "Bearer " + token})
    r = c.getresponse()
    out = (r.status, r.read().decode())
    c.close()
    return out


first_odd = []  # the first answer neither 200 nor 401, for the report


def client(port, stop_at, key_for, records, pause_s=0.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    body = json.dumps({"tenant": TENANT, "tokens": 1})
    while time.time() < stop_at:
        key = key_for()
        t = time.time()
        try:
            conn.request("POST", "/v1/admit", body, {"Authorization": "Bearer " + key})
            r = conn.getresponse()
            text = r.read()
            status = r.status
            if status not in (200, 401) and not first_odd:
                first_odd.append(text.decode(errors="replace")[:200])
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            status = "error"
        records.append((t, key, status))
        time.sleep(pause_s)
    conn.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--admin-token", required=True)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--overlap-s", type=int, default=6)
    a = ap.parse_args()
    admin = a.admin_token
    status, text = call(a.port, "PUT", "/v1/admin/tenants/" + TENANT, {"plan": "chaos"}, admin)
    assert status in (200, 201), text
    status, text = call(a.port, "POST", "/v1/admin/keys/" + TENANT,
                        {"op": "add", "key_sha256": digest(KEY_A)}, admin)
    assert status == 200, text
    time.sleep(0.3)  # a poll: the key is in force

    start = time.time()
    moved = {"at": None}
    records = []
    threads = []
    for i in range(a.clients):
        straggler = i == 0
        key_for = (lambda: KEY_A) if straggler else (
            lambda: KEY_B if moved["at"] is not None and time.time() >= moved["at"] else KEY_A)
        # The straggler is a client that was not told: it keeps a steady 100 requests a second.
        threads.append(threading.Thread(
            target=client,
            args=(a.port, start + a.seconds, key_for, records, 0.01 if straggler else 0.0)))
    for t in threads:
        t.start()
    time.sleep(3)
    rotated_at = time.time()
    status, text = call(a.port, "POST", "/v1/admin/keys/" + TENANT,
                        {"op": "rotate", "key_sha256": digest(KEY_B),
                         "overlap_s": a.overlap_s}, admin)
    assert status == 200, text
    expires_at = json.loads(text)["keys"][0]["expires_at"]
    moved["at"] = rotated_at + a.overlap_s / 2
    for t in threads:
        t.join()

    a_valid = [r for r in records if r[1] == KEY_A and r[0] < expires_at - MARGIN_S]
    a_gone = [r for r in records if r[1] == KEY_A and r[0] >= expires_at + MARGIN_S]
    b_used = [r for r in records if r[1] == KEY_B]
    overlap = [r for r in records if rotated_at <= r[0] < expires_at - MARGIN_S]
    def refused(rs):
        return sum(1 for r in rs if r[2] in (401, 403))

    table(f"key rotation under load: {a.clients} clients, overlap {a.overlap_s} s", [
        ("requests", len(records)),
        ("requests during the overlap (either key)", len(overlap)),
        ("  of them refused (401, 403)", refused(overlap)),
        ("old key before its end: sent / refused", f"{len(a_valid)} / {refused(a_valid)}"),
        ("new key: sent / refused", f"{len(b_used)} / {refused(b_used)}"),
        ("old key after its end: sent / admitted / 401",
         f"{len(a_gone)} / {sum(1 for r in a_gone if r[2] == 200)} / "
         f"{sum(1 for r in a_gone if r[2] == 401)}"),
        ("answers by status", dict(sorted(Counter(str(r[2]) for r in records).items()))),
        ("the first other answer", first_odd[0] if first_odd else "-"),
    ])


if __name__ == "__main__":
    main()
