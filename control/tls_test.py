#!/usr/bin/python3
"""HTTPS on the HTTP API and mTLS on the gRPC front of a real dripgate-control, with real TLS
clients: curl, and Python's grpc (grpcio) calling Envoy's rate-limit service. Certificates are
made here with openssl(1) for this run only: a CA, the server's certificate, a client's
certificate signed by the CA, and one signed by another CA.

Checks: an admission over HTTPS; plaintext HTTP on the TLS port gets no answer; with a client
CA the HTTP API refuses a client without a certificate and one whose certificate another CA
signed, each counted once in dripgate_http_tls_handshake_failures_total by its cause; gRPC with the right client certificate is answered, with a wrong one or none the
handshake fails; SIGHUP reads new certificate files (a certificate of a new CA is served after
it), and a key that does not match leaves the running ones; the gRPC front serves the new
certificate within seconds; a daemon whose key does not match
its certificate does not start and says which field, never the key.

usage: tls_test.py DRIPGATE_CONTROL
"""
import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import grpc

CONTROL = sys.argv[1] if len(sys.argv) > 1 else None
WORK = tempfile.mkdtemp(prefix="dg-tls.")
atexit.register(shutil.rmtree, WORK, True)  # the run's keys go with it, pass or fail
RLS = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


def fail(msg):
    print(f"tls_test: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def path(name):
    return os.path.join(WORK, name)


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", path(f"{name}.key"), "-out", path(f"{name}.pem"), "-days", "1",
            "-subj", f"/CN=dripgate test {name}")


def make_cert(name, ca, server):
    """A key and a certificate for name signed by ca; a server's for 127.0.0.1 and localhost."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", path(f"{name}.key"), "-out", path(f"{name}.csr"), "-subj", f"/CN={name}")
    ext = path(f"{name}.ext")
    with open(ext, "w") as f:
        if server:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        else:
            f.write("extendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", path(f"{name}.csr"), "-CA", path(f"{ca}.pem"), "-CAkey",
            path(f"{ca}.key"), "-CAcreateserial", "-out", path(f"{name}.pem"), "-days", "1",
            "-extfile", ext)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(name, http_port, grpc_port, redis_port, cert, key):
    with open(path(name), "w") as f:
        f.write(f"""\
redis: {{ url: "redis://127.0.0.1:{redis_port}/0" }}
control:
  listen: "127.0.0.1:{http_port}"
  threads: 1
  tls: {{ cert_file: {path(cert)}, key_file: {path(key)}, client_ca_file: {path('ca.pem')} }}
  grpc_listen: "127.0.0.1:{grpc_port}"
  grpc_tls: {{ cert_file: {path(cert)}, key_file: {path(key)},
              client_ca_file: {path('ca.pem')} }}
plans:
  pro: {{ gates: {{ tenant: {{ capacity: 1000, refill_per_s: 100 }} }} }}
tenants:
  acme: {{ plan: pro }}
""")
    return path(name)


def curl(port, url_path, ca, cert=None, key=None, data=None):
    args = ["curl", "-sS", "--max-time", "5", "-o", "-", "-w", "\n%{http_code}",
            "--cacert", path(ca), f"https://127.0.0.1:{port}{url_path}"]
    if cert:
        args += ["--cert", path(cert), "--key", path(key)]
    if data:
        args += ["-H", "Content-Type: application/json", "--data", data]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    body, _, code = r.stdout.rpartition("\n")
    return int(code), body


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def rls_request(tenant):
    """RateLimitRequest{domain: "dripgate", descriptors: [{entries: [{tenant: tenant}]}]}."""
    entry = field(1, b"tenant") + field(2, tenant.encode())
    return field(1, b"dripgate") + field(2, field(1, entry))


def rls_call(port, cert=None, key=None, ca="ca.pem"):
    """overall_code of one ShouldRateLimit call (1: OK), or the gRPC status code's name."""
    creds = grpc.ssl_channel_credentials(
        root_certificates=open(path(ca), "rb").read(),
        private_key=open(path(key), "rb").read() if key else None,
        certificate_chain=open(path(cert), "rb").read() if cert else None)
    with grpc.secure_channel(f"127.0.0.1:{port}", creds) as ch:
        call = ch.unary_unary(RLS)
        try:
            answer = call(rls_request("acme"), timeout=5)
        except grpc.RpcError as e:
            return e.code().name
    # overall_code is field 1, a varint: its tag 0x08 then the value.
    return answer[1] if answer[:1] == b"\x08" else 0


def wait_healthy(proc, port, ca, cert, key, log):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            fail(f"dripgate-control exited {proc.returncode}:\n" + open(log).read())
        if curl(port, "/healthz", ca, cert, key)[0] == 200:
            return
        time.sleep(0.1)
    fail("dripgate-control did not answer /healthz over HTTPS:\n" + open(log).read())


def check_refusals(http_port, grpc_port):
    code, why = curl(http_port, "/healthz", "ca.pem")
    if code is not None:
        fail(f"HTTPS without a client certificate answered {code}")
    code, why = curl(http_port, "/healthz", "ca.pem", "rogue.pem", "rogue.key")
    if code is not None:
        fail(f"HTTPS with a certificate of another CA answered {code}")
    with socket.create_connection(("127.0.0.1", http_port), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            reply = s.recv(4096)
        except (ConnectionResetError, socket.timeout):
            reply = b""
        if reply.startswith(b"HTTP/"):
            fail(f"plaintext HTTP on the TLS port was answered: {reply[:60]!r}")
    for cert, key in (("rogue.pem", "rogue.key"), (None, None)):
        got = rls_call(grpc_port, cert, key)
        if got != "UNAVAILABLE":
            fail(f"gRPC with client certificate {cert} gave {got}, want a failed handshake")
    # Each failed handshake of the HTTP API counted once, by its cause; a connection that only
    # opens and closes is none.
    socket.create_connection(("127.0.0.1", http_port), timeout=5).close()
    time.sleep(0.2)
    code, metrics = curl(http_port, "/metrics", "ca.pem", "client.pem", "client.key")
    for reason in ("no_client_certificate", "bad_client_certificate", "not_tls"):
        line = f'dripgate_http_tls_handshake_failures_total{{reason="{reason}"}} 1'
        if code != 200 or line not in metrics.splitlines():
            fail(f"{line} not in /metrics ({code}):\n" + "\n".join(
                l for l in (metrics or "").splitlines() if "tls_handshake" in l))
    if 'reason="other"' in metrics:
        fail("a handshake failure counted as other:\n" + metrics)


def check_bad_key_refused(redis_port):
    """A key that is not the certificate's: the daemon does not start, naming the field."""
    cfg = write_config("bad.yaml", free_port(), free_port(), redis_port, "server.pem",
                       "other.key")
    r = subprocess.run([CONTROL, "--config", cfg], capture_output=True, text=True, timeout=30)
    key_text = open(path("other.key")).read().splitlines()[1]
    if r.returncode == 0 or "control.tls.key_file" not in r.stderr or key_text in r.stderr:
        fail(f"a mismatched key: exit {r.returncode}, {r.stderr}")


def served_issuer(port):
    """The CN of the issuer of the certificate the HTTP API serves."""
    r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-cert",
                        path("client.pem"), "-key", path("client.key")],
                       input="", capture_output=True, text=True, timeout=10)
    for line in r.stdout.splitlines():
        if line.startswith("issuer="):
            return line
    return r.stdout[-300:]


def main():
    if not CONTROL:
        fail(__doc__)
    make_ca("ca")
    make_ca("rogue-ca")
    make_ca("ca2")
    make_cert("server", "ca", server=True)
    make_cert("client", "ca", server=False)
    make_cert("rogue", "rogue-ca", server=False)
    make_cert("server2", "ca2", server=True)
    make_cert("other", "ca", server=True)

    redis_port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(redis_port), "--save", "",
                              "--appendonly", "no", "--dir", WORK], stdout=subprocess.DEVNULL)
    http_port, grpc_port = free_port(), free_port()
    # The certificate files the daemon reads, replaced below for the reload.
    for src, dst in (("server.pem", "live.pem"), ("server.key", "live.key")):
        with open(path(src)) as s, open(path(dst), "w") as d:
            d.write(s.read())
    cfg = write_config("dripgate.yaml", http_port, grpc_port, redis_port, "live.pem", "live.key")
    log = path("control.log")
    proc = subprocess.Popen([CONTROL, "--config", cfg], stdout=open(log, "w"),
                            stderr=subprocess.STDOUT)
    try:
        wait_healthy(proc, http_port, "ca.pem", "client.pem", "client.key", log)
        code, body = curl(http_port, "/v1/admit", "ca.pem", "client.pem", "client.key",
                          '{"tenant":"acme"}')
        if code != 200 or '"allowed":true' not in body:
            fail(f"admit over HTTPS: {code} {body}")
        if rls_call(grpc_port, "client.pem", "client.key") != 1:
            fail(f"gRPC over mTLS: {rls_call(grpc_port, 'client.pem', 'client.key')}")
        check_refusals(http_port, grpc_port)

        # A key that does not match on SIGHUP: refused, the running certificates stay.
        with open(path("other.key")) as s, open(path("live.key"), "w") as d:
            d.write(s.read())
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "control.tls.key_file" not in open(log).read():
            if time.monotonic() > deadline:
                fail("a mismatched key on SIGHUP was not reported:\n" + open(log).read())
            time.sleep(0.05)
        if curl(http_port, "/healthz", "ca.pem", "client.pem", "client.key")[0] != 200:
            fail("the running certificate went with a bad reload")

        # New certificate files and SIGHUP: the next connections get the new certificate.
        for src, dst in (("server2.pem", "live.pem"), ("server2.key", "live.key")):
            with open(path(src)) as s, open(path(dst), "w") as d:
                d.write(s.read())
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while curl(http_port, "/healthz", "ca2.pem", "client.pem", "client.key")[0] != 200:
            if time.monotonic() > deadline:
                fail(f"after SIGHUP not served by ca2: {served_issuer(http_port)}\n" +
                     open(log).read())
            time.sleep(0.1)
        if curl(http_port, "/healthz", "ca.pem", "client.pem", "client.key")[0] is not None:
            fail("the old certificate is still served after the reload")
        # The gRPC front's credentials read the changed files themselves (every 2 s).
        deadline = time.monotonic() + 10
        while rls_call(grpc_port, "client.pem", "client.key", ca="ca2.pem") != 1:
            if time.monotonic() > deadline:
                fail("the gRPC front does not serve the new certificate")
            time.sleep(0.2)
        for secret in (open(path("server.key")).read(), open(path("other.key")).read()):
            if secret.splitlines()[1] in open(log).read():
                fail("a private key reached the log")
        check_bad_key_refused(redis_port)
        print("tls_test: ok")
    finally:
        for p in (proc, redis):
            p.terminate()
            p.wait(timeout=20)


if __name__ == "__main__":
    main()
