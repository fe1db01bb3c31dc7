#!/usr/bin/env python3
"""Both systemd units' ExecStart lines under the units' own user and sandbox, where systemd is
not PID 1 (a container, CI): the sandbox is rebuilt from the unit files with unshare(1) and
setpriv(1), as systemd would set it up, in a private mount namespace whose /run, /var/lib,
/var/log, configuration directory, /etc/passwd and /etc/group are the test's own (the users as
the shipped sysusers.d file makes them).

Checks: dripgate-control starts as its user with redis.on_failure: local and its journal at the
documented /var/lib/dripgate/journal under ProtectSystem=strict; the dataplane's control socket
is 0660 and group dripgate's; the control daemon tags an admitted flow through it, and another
unprivileged user cannot connect to it. A [Service] directive this test does not reproduce
fails it, so the units cannot grow a sandbox the test silently ignores.

usage: unit_sandbox_test.py CONTROL_UNIT DATAPLANE_UNIT SYSUSERS_CONF
"""
import json
import os
import pwd
import resource
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

# What each directive needs here: reproduced below, or not part of the sandbox (how systemd
# restarts, stops or reloads the service, resource limits the test does not reach).
REPRODUCED = {"User", "Group", "ExecStart", "StateDirectory", "StateDirectoryMode",
              "LogsDirectory", "LogsDirectoryMode", "RuntimeDirectory", "RuntimeDirectoryMode",
              "ReadWritePaths", "ProtectSystem", "ProtectHome", "PrivateTmp", "NoNewPrivileges",
              "LoadCredential", "LimitNOFILE"}
NOT_SANDBOX = {"Type", "ExecStartPre", "ExecReload", "Restart", "RestartSec", "TimeoutStopSec",
               "RuntimeDirectoryPreserve", "LimitMEMLOCK", "CPUAffinity"}


def fail(msg):
    print(f"unit_sandbox_test: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def run(*args):
    subprocess.run(args, check=True)


def parse_unit(path):
    service, section = {}, None
    for raw in open(path):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
            continue
        key, _, value = line.partition("=")
        if section == "[Service]":
            service.setdefault(key, []).append(value)
    unknown = set(service) - REPRODUCED - NOT_SANDBOX
    if unknown:
        fail(f"{path}: directives this test does not reproduce: {sorted(unknown)}")
    return service


def one(unit, key, default=None):
    return unit.get(key, [default])[-1]


def mount_points():
    """The mount points one can reach here (not those under a mount put over them)."""
    with open("/proc/self/mountinfo") as f:
        return [m for m in (line.split()[4] for line in f) if os.path.exists(m)]


# ---- the world: this namespace's /run, /var/lib, /var/log, /etc/{passwd,group}, config dir ----

def make_users(sysusers, work):
    """The users and groups of the sysusers.d file, appended to copies of /etc/passwd and
    /etc/group bound over the originals, at ids unused here (as systemd-sysusers picks them)."""
    used_uids = {p.pw_uid for p in pwd.getpwall()}
    next_id = 60900
    passwd, group = open("/etc/passwd").read(), open("/etc/group").read()
    for line in open(sysusers):
        fields = shlex.split(line, comments=True)
        if not fields or fields[0] != "u":
            continue
        name, home = fields[1], fields[4] if len(fields) > 4 else "/"
        while next_id in used_uids:
            next_id += 1
        passwd += f"{name}:x:{next_id}:{next_id}::{home}:/usr/sbin/nologin\n"
        group += f"{name}:x:{next_id}:\n"
        next_id += 1
    for name, text in (("passwd", passwd), ("group", group)):
        path = os.path.join(work, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o644)
        run("mount", "--bind", path, f"/etc/{name}")


def private_tmpfs(path):
    """A tmpfs over path's nearest existing ancestor, then path made in it."""
    top = path
    while not os.path.isdir(top):
        top = os.path.dirname(top)
    run("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", top)
    os.makedirs(path, exist_ok=True)


def ids(unit):
    user = one(unit, "User")
    if not user:
        return 0, 0
    pw = pwd.getpwnam(user)
    gid = pw.pw_gid
    group = one(unit, "Group")
    if group:
        import grp
        gid = grp.getgrnam(group).gr_gid
    return pw.pw_uid, gid


def credentials(unit, name, uid):
    """LoadCredential=ID:PATH as systemd hands it over: /run/credentials/<unit>/ID, the
    service's user's, read-only."""
    d = f"/run/credentials/{name}"
    for spec in unit.get("LoadCredential", []):
        cid, _, src = spec.partition(":")
        os.makedirs(d, mode=0o500, exist_ok=True)
        dst = os.path.join(d, cid)
        with open(src) as s, open(dst, "w") as t:
            t.write(s.read())
        os.chown(dst, uid, -1)
        os.chmod(dst, 0o400)
    if os.path.isdir(d):
        os.chown(d, uid, -1)


def managed_dirs(unit, uid, gid):
    """StateDirectory=, LogsDirectory=, RuntimeDirectory=: made, the service user's."""
    made = []
    for key, base in (("StateDirectory", "/var/lib"), ("LogsDirectory", "/var/log"),
                      ("RuntimeDirectory", "/run")):
        for name in " ".join(unit.get(key, [])).split():
            path = os.path.join(base, name)
            os.makedirs(path, exist_ok=True)
            os.chown(path, uid, gid)
            os.chmod(path, int(one(unit, key + "Mode", "0755"), 8))
            made.append(path)
    return made


# ---- one service: its mount namespace, then its user ----

def sandbox_script(unit, writable):
    """Shell run in the service's own mount namespace before exec: ProtectSystem=, ProtectHome=,
    PrivateTmp= as systemd applies them."""
    cmds = ["set -e", "mount --make-rprivate /"]
    protect = one(unit, "ProtectSystem", "no")
    rw = writable + unit.get("ReadWritePaths", [])
    for p in rw:
        cmds.append(f"mount --bind {shlex.quote(p)} {shlex.quote(p)}")
    if protect == "strict":
        api = ("/proc", "/sys", "/dev")
        ro = [m for m in mount_points() if not m.startswith(api)]
        # Every mount but the API file systems and the writable paths, read-only.
        cmds.append("for m in " + " ".join(shlex.quote(m) for m in ro) +
                    "; do mount -o remount,bind,ro \"$m\" 2>/dev/null || "
                    "{ mount --bind \"$m\" \"$m\" && mount -o remount,bind,ro \"$m\"; }; done")
        for p in rw:
            cmds.append(f"mount -o remount,bind,rw {shlex.quote(p)}")
    elif protect in ("yes", "full"):
        dirs = ["/usr", "/boot", "/efi"] + (["/etc"] if protect == "full" else [])
        for d in dirs:
            # Each mount at or below d read-only, as systemd makes them (a bind of d to itself
            # first, recursive, when d is no mount point of its own).
            below = [m for m in mount_points() if m == d or m.startswith(d + "/")]
            cmds.append(f"[ ! -d {d} ] || mount --rbind {d} {d}")
            for m in [d] + below:
                cmds.append(f"[ ! -d {m} ] || mount -o remount,bind,ro {shlex.quote(m)}")
    elif protect != "no":
        fail(f"ProtectSystem={protect}: not reproduced")
    if one(unit, "ProtectHome", "no") == "yes":
        for d in ("/home", "/root", "/run/user"):
            cmds.append(f"[ ! -d {d} ] || mount -t tmpfs -o ro,mode=0755 tmpfs {d}")
    if one(unit, "PrivateTmp", "no") == "yes":
        cmds.append("mount -t tmpfs -o mode=1777 tmpfs /tmp")
        cmds.append("[ ! -d /var/tmp ] || mount -t tmpfs -o mode=1777 tmpfs /var/tmp")
    cmds.append('exec "$@"')
    return "\n".join(cmds)


def start(unit, name, out, writable):
    uid, gid = ids(unit)
    credentials(unit, name, uid)
    writable = writable + managed_dirs(unit, uid, gid)
    user = []
    if uid:
        user = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups"]
    if one(unit, "NoNewPrivileges", "no") == "yes":
        user = (user or ["setpriv"]) + ["--no-new-privs"]
    limit = []
    if one(unit, "LimitNOFILE"):
        # Within the hard limit this process has: a container may not let root raise it.
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        n = int(one(unit, "LimitNOFILE"))
        n = n if hard == resource.RLIM_INFINITY else min(n, hard)
        limit = ["prlimit", f"--nofile={n}"]
    exec_start = shlex.split(one(unit, "ExecStart"))
    exec_start[0] = installed(exec_start[0])
    argv = (["unshare", "--mount", "--propagation", "private", "sh", "-c",
             sandbox_script(unit, writable), "sandbox"] + limit + user + exec_start)
    log = open(out, "w")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), uid


def installed(binary):
    """binary where the unit would find it installed: a copy in this test's own /run. The build
    tree may lie under /tmp or /home, which the unit's PrivateTmp= and ProtectHome= hide, as they
    would hide it from the real service."""
    os.makedirs("/run/dg-bin", mode=0o755, exist_ok=True)
    dest = os.path.join("/run/dg-bin", os.path.basename(binary))
    if not os.path.exists(dest):
        shutil.copy2(binary, dest)
    return dest


def config_path(unit):
    argv = shlex.split(one(unit, "ExecStart"))
    return argv[argv.index("--config") + 1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def control_call(path, request):
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(path)
        s.sendall((json.dumps(request) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return json.loads(buf)


def connect_as(uid, gid, sock):
    """What connecting to sock as uid:gid (and the user's groups) says; empty when it connects.
    Debian's python, which any user may run (python3 on the PATH may be root's own)."""
    probe = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups",
         "/usr/bin/python3", "-c",
         f"import socket; socket.socket(socket.AF_UNIX).connect({sock!r})"],
        capture_output=True, text=True)
    return "" if probe.returncode == 0 else probe.stderr.strip() or f"exit {probe.returncode}"


def http(port, method, path, token, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=body.encode() if body else None,
                                 headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode(), {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), {k.lower(): v for k, v in e.headers.items()}


def wait_for(what, check, procs, logs, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for p, log in zip(procs, logs):
            if p.poll() is not None:
                fail(f"{what}: a daemon exited ({p.returncode}):\n" + open(log).read())
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.05)
    fail(f"{what}: not within {seconds} s:\n" + "".join(open(log).read() for log in logs))


def world(control_unit_file, dataplane_unit_file, sysusers):
    control_unit, dp_unit = parse_unit(control_unit_file), parse_unit(dataplane_unit_file)
    work = tempfile.mkdtemp(prefix="dg-sandbox.")
    run("mount", "--make-rprivate", "/")
    for d in ("/run", "/var/lib", "/var/log"):
        private_tmpfs(d)
    cfg = config_path(control_unit)
    if config_path(dp_unit) != cfg:
        fail("the two units read different configuration files")
    private_tmpfs(os.path.dirname(cfg))
    make_users(sysusers, work)

    # Redis on the box over a unix socket, with a password handed over as a credential.
    password, token = secrets.token_hex(16), secrets.token_hex(16)
    os.makedirs("/run/dg-redis", mode=0o755)
    redis_sock = "/run/dg-redis/redis.sock"
    redis = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", redis_sock,
                              "--unixsocketperm", "666", "--save", "", "--appendonly", "no",
                              "--requirepass", password, "--dir", work],
                             stdout=subprocess.DEVNULL)
    for spec in control_unit.get("LoadCredential", []):
        cid, _, src = spec.partition(":")
        with open(src, "w") as f:
            f.write({"redis-password": password, "auth-token": token}.get(cid, "x") + "\n")
    port = free_port()
    cred = "/run/credentials/dripgate-control.service"
    with open(cfg, "w") as f:
        f.write(f"""\
redis:
  url: "unix://{redis_sock}"
  password_file: {cred}/redis-password
  on_failure: local
  journal: /var/lib/dripgate/journal
control:
  listen: "127.0.0.1:{port}"
  threads: 1
  auth_token_file: {cred}/auth-token
  dataplane_socket: /run/dripgate/dataplane.sock
plans:
  pro: {{ class: gold, gates: {{ tenant: {{ capacity: 100, refill_per_s: 10 }} }} }}
tenants:
  acme: {{ plan: pro }}
dataplane:
  eal: ["-l", "0-1", "--no-huge", "--no-shconf", "-m", "256", "--no-pci",
        "--vdev=net_null0", "--vdev=net_null1", "--file-prefix=dgsandbox"]
  ports: {{ client: 0, cluster: 1 }}
  lcores: {{ rx: 1, drip: 1 }}
  mbufs: 4095
  classes:
    gold: {{ weight: 4 }}
    default: {{ weight: 1 }}
  control_socket: /run/dripgate/dataplane.sock
  control_socket_group: dripgate
""")
    os.chmod(cfg, 0o640)
    uid, gid = ids(control_unit)
    os.chown(cfg, 0, gid)

    dp_log, control_log = os.path.join(work, "dp.log"), os.path.join(work, "control.log")
    procs = []
    try:
        dp, _ = start(dp_unit, "dripgate-dataplane.service", dp_log, [])
        procs.append(dp)
        sock = "/run/dripgate/dataplane.sock"
        wait_for("the dataplane's socket", lambda: control_call(sock, {"op": "stats"})["ok"],
                 [dp], [dp_log], 60)
        st = os.stat(sock)
        if st.st_mode & 0o777 != 0o660:
            fail(f"{sock}: mode {st.st_mode & 0o777:o}, want 660")
        if st.st_gid != gid:
            fail(f"{sock}: group {st.st_gid}, want dripgate's ({gid})")

        # Another unprivileged user is refused by the socket's mode; the control daemon's user
        # (the same probe, as it) gets in.
        nobody = pwd.getpwnam("nobody")
        refused = connect_as(nobody.pw_uid, nobody.pw_gid, sock)
        if "PermissionError" not in refused:
            fail(f"user nobody, connecting to {sock}: {refused or 'connected'}")
        allowed = connect_as(uid, gid, sock)
        if allowed:
            fail(f"the control daemon's user cannot connect to {sock}: {allowed}")

        control, uid = start(control_unit, "dripgate-control.service", control_log, [])
        procs.append(control)
        wait_for("dripgate-control's /healthz",
                 lambda: http(port, "GET", "/healthz", token)[0] == 200,
                 procs, [dp_log, control_log])
        # unshare(1), prlimit(1) and setpriv(1) each exec the next: the daemon has Popen's pid.
        status = open(f"/proc/{control.pid}/status").read()
        if f"Uid:\t{uid}\t{uid}" not in status:
            fail(f"dripgate-control does not run as its user {uid}:\n{status}")
        journal = [n for n in os.listdir("/var/lib/dripgate") if n.startswith("journal")]
        if not journal or os.stat(os.path.join("/var/lib/dripgate", journal[0])).st_uid != uid:
            fail(f"no journal of user {uid} in /var/lib/dripgate: {journal}")

        flow = {"src": "10.0.0.1", "sport": 4000, "dst": "10.0.0.2", "dport": 80, "proto": "tcp"}
        code, body, headers = http(port, "POST", "/v1/admit", token,
                                   json.dumps({"tenant": "acme", "flow": flow}))
        if code != 200 or headers.get("dripgate-flow-tag") != "ok":
            fail(f"admit: {code} {body} {headers}\n" + open(control_log).read())
        flows = control_call(sock, {"op": "stats"})["stats"]["flows"]
        if flows != 1:
            fail(f"the dataplane holds {flows} flows after an admission, want 1")
        print("unit_sandbox_test: ok")
    finally:
        for p in procs + [redis]:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs + [redis]:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


def main():
    if os.geteuid() != 0:
        fail("needs root (mount namespaces, setpriv)")
    if len(sys.argv) == 5 and sys.argv[1] == "--world":
        world(*sys.argv[2:])
        return
    if len(sys.argv) != 4:
        fail(__doc__)
    # The configuration directory must exist for the world's tmpfs to cover it alone: over its
    # nearest ancestor (/etc for /etc/dripgate) the tmpfs would hide the box's passwd and group.
    # One made here is removed with the test.
    made = config_dir = os.path.dirname(config_path(parse_unit(sys.argv[1])))
    while not os.path.isdir(os.path.dirname(made)):
        made = os.path.dirname(made)
    made = None if os.path.isdir(config_dir) else made
    os.makedirs(config_dir, exist_ok=True)
    try:
        # Everything mounted here goes with the namespace when the test ends.
        rc = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                             os.path.abspath(__file__), "--world"] + sys.argv[1:]).returncode
    finally:
        path = config_dir
        while made:
            os.rmdir(path)
            made, path = (None if path == made else made), os.path.dirname(path)
    sys.exit(rc)


if __name__ == "__main__":
    main()
