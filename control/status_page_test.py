#!/usr/bin/python3
"""The status page (GET /ui) of a real dripgate-control in a real headless Chromium, driven over
the DevTools protocol (python3-websocket).

A redis-server and the daemon are started for the run, with an admin token and
control.status pointing at a dataplane's and a receiver's metrics pages that this script serves.
Chromium answers the page's Basic challenge with the admin token as a person at the browser's
prompt would (Fetch.authRequired), so the page's own requests carry it the way a browser's do.
Checks: the page loads and shows the daemon's health and the dataplane; a refusal caused through
the API (a tenant admitted past its bucket) shows on the page within 2 s; no console error, no
uncaught exception and no failed request in the whole run. A screenshot is saved as
<build>/meson-logs/status_page.png, its path printed.

usage: status_page_test.py DRIPGATE_CONTROL MESON_LOGS_DIR
"""
import atexit
import base64
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import websocket

CONTROL, LOGS = sys.argv[1], sys.argv[2]
CHROMIUM = "/usr/bin/chromium"
TOKEN = "st4tus-page"
WORK = tempfile.mkdtemp(prefix="dg-ui.")
atexit.register(shutil.rmtree, WORK, True)
PROCS = []


def stop_all():
    for p in reversed(PROCS):
        if p.poll() is None:
            p.kill()
            p.wait()


atexit.register(stop_all)


def fail(msg):
    print(f"status_page_test: FAIL: {msg}", file=sys.stderr)
    log = os.path.join(WORK, "control.log")
    if os.path.exists(log):
        with open(log) as f:
            print("dripgate-control's log:\n" + f.read()[-4000:], file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond, limit, what):
    until = time.monotonic() + limit
    while time.monotonic() < until:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    fail(f"{what} not within {limit} s")


class Metrics(http.server.BaseHTTPRequestHandler):
    """The dataplane's and the receiver's metrics pages, moving on each scrape."""
    scrapes = 0

    def do_GET(self):
        Metrics.scrapes += 1
        n = Metrics.scrapes
        if self.path == "/dataplane":
            body = (f'dripgate_dataplane_sent_bytes_total{{class="gold",port="0"}} {n * 60000}\n'
                    f'dripgate_dataplane_sent_packets_total{{class="gold",port="0"}} {n * 60}\n'
                    'dripgate_dataplane_drip_configured_bytes_per_second{class="gold"} 125000\n'
                    'dripgate_dataplane_queue_depth_packets{class="gold"} 300\n'
                    'dripgate_dataplane_queue_limit_packets{class="gold"} 1024\n'
                    f'dripgate_dataplane_drops_total{{class="default",cause="depth"}} {n}\n'
                    # the port's own series, and a drop without a class
                    'dripgate_dataplane_drip_configured_bytes_per_second{port="cluster"} 250000\n'
                    'dripgate_dataplane_drops_total{cause="malformed"} 3\n')
        else:
            body = "".join(
                f'dripgate_iat_interarrival_seconds_bucket{{iface="cluster0",le="{le}"}} {c * n}\n'
                for le, c in (("1e-05", 1), ("0.0001", 4), ("0.001", 9), ("0.01", 10),
                              ("+Inf", 10)))
            body += 'dripgate_iat_burst_factor{iface="cluster0",window="10ms"} 1.1\n'
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def start_daemons():
    redis_port, http_port = free_port(), free_port()
    PROCS.append(subprocess.Popen(
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", WORK], stdout=subprocess.DEVNULL))
    metrics = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=metrics.serve_forever, daemon=True).start()
    mport = metrics.server_address[1]
    cfg = os.path.join(WORK, "control.yaml")
    with open(cfg, "w") as f:
        f.write(f"""\
redis: {{ url: "redis://127.0.0.1:{redis_port}/0" }}
control:
  listen: "127.0.0.1:{http_port}"
  threads: 2
  admin_token: "{TOKEN}"
  dataplane_socket: "{WORK}/dp.sock"
  status:
    dataplane_metrics_url: "http://127.0.0.1:{mport}/dataplane"
    iat_metrics_url: "http://127.0.0.1:{mport}/iat"
plans:
  small: {{ gates: {{ tenant: {{ capacity: 2, refill_per_s: 0.01 }} }}, quota: {{ tokens_per_month: 1000 }} }}
tenants:
  acme: {{ plan: small }}
""")
    with open(os.path.join(WORK, "control.log"), "w") as log:
        PROCS.append(subprocess.Popen([CONTROL, "--config", cfg], stdout=log, stderr=log))

    def ready():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=1) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False
    wait_for(ready, 10, "dripgate-control ready")
    return http_port


def admit(port, tenant):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/admit",
                                 data=json.dumps({"tenant": tenant}).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


class Browser:
    """Headless Chromium and one page of it, over the DevTools protocol (flat sessions)."""

    def __init__(self):
        profile = os.path.join(WORK, "chromium")
        os.mkdir(profile)
        PROCS.append(subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
             "--remote-debugging-port=0", "--window-size=1100,900", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(WORK, "chromium.log"), "w")))
        active = os.path.join(profile, "DevToolsActivePort")
        wait_for(lambda: os.path.exists(active) and os.path.getsize(active) > 0, 20,
                 "Chromium's DevTools port")
        with open(active) as f:
            port, path = f.read().split("\n")[:2]
        self.ws = websocket.create_connection(f"ws://127.0.0.1:{port}{path}", timeout=10,
                                              suppress_origin=True)
        self.next_id = 0
        self.events = []
        self.session = None
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]

    def send(self, method, params=None, session=None):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        return self.next_id

    def call(self, method, params=None, session=None):
        """Sends a command and waits for its answer, handling the events that come meanwhile."""
        want = self.send(method, params, session)
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == want:
                if "error" in m:
                    fail(f"{method}: {m['error']}")
                return m.get("result", {})
            if "method" in m:
                self.event(m)

    def page(self, method, params=None):
        return self.call(method, params, self.session)

    def event(self, e):
        """Keeps an event; answers an auth challenge and lets a paused request go on at once
        (a navigation waits for them)."""
        self.events.append(e)
        p = e.get("params", {})
        if e["method"] == "Fetch.authRequired":
            # The admin token typed at the browser's prompt (any user name).
            self.send("Fetch.continueWithAuth", {
                "requestId": p["requestId"],
                "authChallengeResponse": {"response": "ProvideCredentials",
                                          "username": "admin", "password": TOKEN}},
                self.session)
            self.challenges += 1
        elif e["method"] == "Fetch.requestPaused":
            self.send("Fetch.continueRequest", {"requestId": p["requestId"]}, self.session)

    def pump(self):
        """Handles the events that came while nothing was asked."""
        self.ws.settimeout(0.01)
        try:
            while True:
                m = json.loads(self.ws.recv())
                if "method" in m:
                    self.event(m)
        except websocket.WebSocketTimeoutException:
            pass
        finally:
            self.ws.settimeout(10)

    def evaluate(self, expr):
        self.pump()
        r = self.page("Runtime.evaluate", {"expression": expr, "returnByValue": True})
        if "exceptionDetails" in r:
            fail(f"evaluating {expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    challenges = 0


def problems(events):
    """Console errors, uncaught exceptions, failed requests and HTTP errors the page met."""
    out = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console." + p["type"] + ": " +
                       " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
        elif m == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            out.append("uncaught: " + d.get("exception", {}).get("description", d.get("text")))
        elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
            out.append("log: " + p["entry"]["text"] + " " + p["entry"].get("url", ""))
        elif m == "Network.loadingFailed":
            out.append("request failed: " + p.get("errorText", "") + " " + p.get("requestId"))
        elif m == "Network.responseReceived" and p["response"]["status"] >= 400:
            out.append(f"HTTP {p['response']['status']}: {p['response']['url']}")
    return out


def main():
    if not os.access(CHROMIUM, os.X_OK):
        fail(f"{CHROMIUM} is missing (tools/setup-deps.sh installs the chromium package)")
    port = start_daemons()
    b = Browser()
    for domain in ("Runtime", "Log", "Network", "Page"):
        b.page(domain + ".enable")
    b.page("Fetch.enable", {"handleAuthRequests": True, "patterns": [{"urlPattern": "*"}]})
    b.page("Page.navigate", {"url": f"http://127.0.0.1:{port}/ui"})
    wait_for(lambda: b.evaluate("document.getElementById('health') && "
                                "document.getElementById('health').textContent") == "ok",
             10, "the page showing the daemon's health")
    if b.challenges != 1:
        fail(f"expected one Basic challenge (the page's own fetches reuse it), got {b.challenges}")
    wait_for(lambda: b.evaluate("!document.getElementById('dp-box').hidden && "
                                "document.getElementById('dp').rows.length > 1"),
             10, "the dataplane's classes on the page")
    if b.evaluate("document.getElementById('refused-total').textContent") != "0":
        fail("a refusal shown before any")
    statuses = [admit(port, "acme") for _ in range(3)]
    refused_at = time.monotonic()
    if statuses != [200, 200, 429]:
        fail(f"admissions answered {statuses}, expected 200, 200, 429")
    shown = wait_for(lambda: b.evaluate("Number(document.getElementById('refused-total')"
                                        ".textContent)") >= 1, 5, "the refusal on the page")
    elapsed = time.monotonic() - refused_at
    if elapsed > 2.0:
        fail(f"the refusal took {elapsed:.2f} s to show (at most 2 s)")
    gates = b.evaluate("document.getElementById('gates').innerText")
    closest = b.evaluate("document.getElementById('closest').innerText")
    if "tenant" not in gates or "acme" not in closest:
        fail(f"the refusing gate or the tenant near its limit not shown: {gates!r} {closest!r}")
    wait_for(lambda: b.evaluate("document.querySelectorAll('#iat svg rect').length") >= 5, 5,
             "the receiver's histogram")
    time.sleep(1.2)  # one more refresh with rates in view for the screenshot
    shot = b.page("Page.captureScreenshot", {"format": "png"})
    os.makedirs(LOGS, exist_ok=True)
    png = os.path.join(LOGS, "status_page.png")
    with open(png, "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    b.pump()
    bad = problems(b.events)
    if bad:
        fail("the page met errors:\n  " + "\n  ".join(bad))
    size = int(b.evaluate("document.documentElement.outerHTML.length"))
    print(f"status_page_test: ok: refusal shown {elapsed:.2f} s after its 429, "
          f"page {size} chars; screenshot: {png}")
    try:
        b.call("Browser.close")
    except Exception:  # the browser may close the socket before it answers
        pass


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    main()
