#!/usr/bin/python3
"""A real Prometheus (Debian's) scrapes all three daemons: dripgate-control (with a real
redis-server), dripgate-dataplane on virtual devices with dataplane.metrics_listen, and
`dripgate-iat serve` on a veth pair in network namespaces made here. Checks that every target is
up, one series of each daemon through the query API, and (--expect-names) that every metric name
the given alert-rule files (YAML `expr:`) and Grafana dashboards (JSON `expr`) use, as
tools/metric_names.py reads them, is among the names Prometheus scraped (a histogram's
_bucket/_sum/_count count as its name; a family whose HELP/TYPE a target sent counts without a
series; names that a given rule file records are allowed too). Everything it starts or makes is removed at the
end, pass or fail.

usage: prometheus_test.py CONTROL DATAPLANE IAT BURST [--expect-names FILE...]
"""
import argparse
import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import yaml

PROMETHEUS = "/usr/bin/prometheus"
WORK = tempfile.mkdtemp(prefix="dg-prom.")
TAG = f"dgprom{os.getpid()}"
NS_A, NS_B = TAG + "a", TAG + "b"
IF_A, IF_B = TAG + "va", TAG + "vb"
PROCS = []


def cleanup():
    for p in reversed(PROCS):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    for ns in (NS_A, NS_B):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    shutil.rmtree(WORK, True)


atexit.register(cleanup)
# meson's timeout sends SIGTERM: leave through atexit too.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))


def fail(msg):
    print(f"prometheus_test: FAIL: {msg}", file=sys.stderr)
    for name in ("control.log", "dataplane.log", "iat.log", "prometheus.log"):
        p = os.path.join(WORK, name)
        if os.path.exists(p):
            with open(p, errors="replace") as f:
                print(f"--- {name} (last lines)\n" + "".join(f.readlines()[-15:]), file=sys.stderr)
    sys.exit(1)


def path(name):
    return os.path.join(WORK, name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv, log):
    p = subprocess.Popen(argv, stdout=open(path(log), "w"), stderr=subprocess.STDOUT)
    PROCS.append(p)
    return p


# Every endpoint is on loopback: no proxy from the environment in between.
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url, timeout=5):
    with HTTP.open(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def wait_for(what, check, timeout=30):
    """check() until it returns a true value; that value, or fail naming `what`."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        for p in PROCS:
            if p.poll() is not None:
                fail(f"{p.args[0]} exited with {p.returncode} while waiting for {what}")
        try:
            last = check()
            if last:
                return last
        except OSError as e:
            last = e
        time.sleep(0.2)
    fail(f"timed out waiting for {what} (last: {last})")


def sh(*argv):
    subprocess.run(argv, check=True, capture_output=True)


def start_control(control):
    redis_port, http_port = free_port(), free_port()
    start(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no", "--dir", WORK], "redis.log")
    with open(path("control.yaml"), "w") as f:
        f.write(f"""\
redis: {{ url: "redis://127.0.0.1:{redis_port}/0" }}
control: {{ listen: "127.0.0.1:{http_port}", threads: 1 }}
plans:
  pro: {{ gates: {{ tenant: {{ capacity: 1000, refill_per_s: 100 }} }} }}
tenants:
  acme: {{ plan: pro }}
""")
    start([control, "--config", path("control.yaml")], "control.log")
    wait_for("dripgate-control /healthz",
             lambda: get(f"http://127.0.0.1:{http_port}/healthz")[0] == 200)
    req = urllib.request.Request(f"http://127.0.0.1:{http_port}/v1/admit",
                                 data=b'{"tenant":"acme"}',
                                 headers={"Content-Type": "application/json"})
    with HTTP.open(req, timeout=5) as r:
        if r.status != 200:
            fail(f"admit: {r.status}")
    return http_port


def start_dataplane(dataplane):
    port = free_port()
    eal = ["-l", "0-1", "--no-huge", "--no-shconf", "-m", "256", "--no-pci",
           f"--file-prefix={TAG}", "--vdev=net_null0", "--vdev=net_null1"]
    with open(path("dp.yaml"), "w") as f:
        f.write(f"""\
dataplane:
  eal: {json.dumps(eal)}
  ports: {{ client: 0, cluster: 1 }}
  lcores: {{ rx: 1, drip: 1 }}
  mbufs: 4095
  drip: {{ rate_pps: 2000, rate_bps: 0, batch: 1, max_catchup: 8 }}
  classes:
    default: {{ weight: 1, rate_pps: 0, queue_depth: 256, ttl_ms: 100 }}
  unknown_flows: default
  control_socket: {path("dp.sock")}
  metrics_listen: "127.0.0.1:{port}"
""")
    # net_null's frames are not IP: shaped into `default` so that the drip sends.
    start([dataplane, "--config", path("dp.yaml"), "--shape-non-ip", "default"], "dataplane.log")
    wait_for("the dataplane's /metrics",
             lambda: get(f"http://127.0.0.1:{port}/metrics")[0] == 200)
    return port


def start_iat(iat):
    sh("ip", "netns", "add", NS_A)
    sh("ip", "netns", "add", NS_B)
    sh("ip", "link", "add", IF_A, "netns", NS_A, "type", "veth", "peer", "name", IF_B, "netns",
       NS_B)
    for ns, ifname, me, peer, mac, peer_mac in (
            (NS_A, IF_A, "10.78.0.1", "10.78.0.2", "02:00:00:78:00:01", "02:00:00:78:00:02"),
            (NS_B, IF_B, "10.78.0.2", "10.78.0.1", "02:00:00:78:00:02", "02:00:00:78:00:01")):
        sh("ip", "-n", ns, "link", "set", ifname, "address", mac)
        sh("ip", "-n", ns, "addr", "add", me + "/24", "dev", ifname)
        sh("ip", "-n", ns, "link", "set", ifname, "up")
        sh("ip", "-n", ns, "neigh", "replace", peer, "lladdr", peer_mac, "dev", ifname, "nud",
           "permanent")
    port = free_port()
    start([iat, "serve", "--iface", IF_B, "--netns", NS_B, "--filter-proto", "udp",
           "--filter-port", "9000", "--listen", f"127.0.0.1:{port}", "--period", "30s"],
          "iat.log")
    wait_for("dripgate-iat serve's /metrics",
             lambda: get(f"http://127.0.0.1:{port}/metrics")[0] == 200)
    return port


def start_prometheus(targets):
    port = free_port()
    scrape = "\n".join(f"""\
  - job_name: {job}
    static_configs: [{{ targets: ["127.0.0.1:{p}"] }}]""" for job, p in targets.items())
    with open(path("prometheus.yml"), "w") as f:
        f.write(f"global: {{ scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s }}\n"
                f"scrape_configs:\n{scrape}\n")
    start([PROMETHEUS, "--config.file", path("prometheus.yml"), "--storage.tsdb.path",
           path("tsdb"), "--web.listen-address", f"127.0.0.1:{port}", "--log.level", "warn"],
          "prometheus.log")
    wait_for("Prometheus ready", lambda: get(f"http://127.0.0.1:{port}/-/ready")[0] == 200)
    return f"http://127.0.0.1:{port}"


def api(prom, endpoint, **params):
    url = f"{prom}/api/v1/{endpoint}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    status, body = get(url)
    j = json.loads(body)
    if status != 200 or j.get("status") != "success":
        fail(f"{url}: {status} {body[:300]}")
    return j["data"]


def query(prom, expr):
    """The value of a query that yields one series, or None while it yields none."""
    result = api(prom, "query", query=expr)["result"]
    if len(result) > 1:
        fail(f"{expr}: {len(result)} series, expected one: {result}")
    return float(result[0]["value"][1]) if result else None


def check_names(prom, files):
    """Every metric name the files' expressions use (tools/metric_names.py reads them) is one
    Prometheus scraped: a series of it, or its family's HELP/TYPE from a target (a counter family
    with no labelled series yet), or one the rule files record."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tools"))
    import metric_names
    used = {metric_names.base_name(n) for f in files for _, _, names in metric_names.used(f)
            for n in names}
    recorded = set()
    for f in files:
        if not f.endswith(".json"):
            with open(f) as y:
                for group in (yaml.safe_load(y) or {}).get("groups", []):
                    recorded.update(r["record"] for r in group.get("rules", []) if "record" in r)
    series = set(api(prom, "label/__name__/values"))
    families = set(api(prom, "metadata"))
    missing = sorted(
        n for n in used
        if n not in recorded and n not in families
        and not any(n + s in series for s in ("", "_bucket", "_sum", "_count")))
    if missing:
        fail(f"used in {' '.join(files)} but not scraped: {', '.join(missing)}")
    print(f"prometheus_test: the {len(used)} names {len(files)} files use were all scraped")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("control")
    ap.add_argument("dataplane")
    ap.add_argument("iat")
    ap.add_argument("burst")
    ap.add_argument("--expect-names", nargs="*", default=[])
    a = ap.parse_args()
    if os.geteuid() != 0:
        fail("needs root (DPDK, BPF, network namespaces)")
    targets = {
        "dripgate-control": start_control(a.control),
        "dripgate-dataplane": start_dataplane(a.dataplane),
        "dripgate-iat": start_iat(a.iat),
    }
    prom = start_prometheus(targets)

    def all_up():
        active = api(prom, "targets")["activeTargets"]
        health = {t["labels"]["job"]: t["health"] for t in active}
        return health if health == {job: "up" for job in targets} else None

    wait_for("every target up", all_up)
    # The receiver's 200 packets, in bursts, after the probe's first scrape.
    r = subprocess.run([a.burst, "--netns", NS_A, "--target", "10.78.0.2:9000", "--burst", "100",
                        "--within", "0", "--count", "2", "--every", "10ms"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"dripgate-burst: {r.stdout} {r.stderr}")
    wait_for("dripgate_iat_packets_total 200", lambda: query(
        prom, f'dripgate_iat_packets_total{{iface="{IF_B}"}}') == 200)
    redis_up = wait_for("dripgate_redis_up", lambda: query(prom, "dripgate_redis_up"))
    if redis_up != 1:
        fail(f"dripgate_redis_up = {redis_up}")
    sent = wait_for("the dataplane's sends", lambda: query(
        prom, 'dripgate_dataplane_sent_packets_total{class="default",port="cluster"}'))
    if sent <= 0:
        fail(f"dripgate_dataplane_sent_packets_total = {sent}")
    peak = wait_for("a 100us peak", lambda: query(
        prom, 'dripgate_iat_window_peak_packets{window="100us"}'))
    if peak < 10:
        fail(f"the bursts' 100us peak is {peak}")
    count = query(prom, "dripgate_iat_interarrival_seconds_count")
    if count != 199:
        fail(f"dripgate_iat_interarrival_seconds_count = {count}, expected 199")
    print(f"prometheus_test: 3 targets up; redis_up 1, dataplane sent {sent:.0f}, "
          f"iat packets 200, 100us peak {peak:.0f}")
    if a.expect_names:
        check_names(prom, a.expect_names)


if __name__ == "__main__":
    main()
