#!/usr/bin/env python3
"""One table per chaos scenario (tools/chaos.sh).

  report.py load TITLE LOAD.json EVENTS CHARGE.json [LABEL=VALUE...]
      LOAD.json from load.py; EVENTS holds "<unix time> fault|healed" lines written when the
      fault began and ended; CHARGE.json what Redis holds afterwards (tokens taken from the
      tenant bucket, quota used, reservations, leases). Extra rows follow as LABEL=VALUE.
  report.py stall TITLE EVENTS CALLS SAMPLES
      stall-grpc: EVENTS as above, CALLS the lines of rls_load --log ("<sent> <ms> ok|over|error"),
      SAMPLES "<unix time> <daemon RSS kB> <Send-Q bytes towards Redis>" every 100 ms.
  report.py idle-tcp TITLE IDLE.json
  report.py idle-unix TITLE IDLE.json
      the figures of idle.py tcp / unix.
"""
import json
import sys
from collections import Counter


def table(title, rows):
    width = max(len(label) for label, _ in rows)
    print(f"\n== {title}")
    for label, value in rows:
        print(f"  {label:<{width}}  {value}")


def extra_rows(args):
    return [tuple(a.split("=", 1)) for a in args]


def pct(values, q):
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def load_report(title, load_path, events_path, charge_path, extra):
    load = json.load(open(load_path))
    recs = load["records"]
    events = {}
    for line in open(events_path):
        when, name = line.split()
        events[name] = float(when) - load["wall_start"]
    fault, healed = events["fault"], events.get("healed", events["fault"])
    ok = [r for r in recs if r[2] == 200]
    bad = [r for r in recs if r[2] != 200]
    kinds = Counter(str(r[2]) for r in bad)
    secs = load["seconds"]
    rows = [("clients, seconds, client timeout",
             f"{load['clients']}, {secs:g} s, {load['timeout']:g} s"),
            ("requests", f"{len(recs)} ({len(recs) / secs:.0f}/s)"),
            ("answered 200", str(len(ok)))]
    rows.append(("failures by kind", ", ".join(f"{k}: {v}" for k, v in sorted(kinds.items()))
                 if kinds else "none"))
    lat = [(b - a) * 1000 for a, b, o in recs if a < fault - 0.5]
    rows.append(("latency before the fault",
                 f"p50 {pct(lat, 0.5):.1f} ms, p99 {pct(lat, 0.99):.1f} ms" if lat
                 else "n/a (faulty from the start)"))
    fault = max(fault, 0.0)
    during = [r for r in recs if fault <= r[0] < healed + 1]
    lat = [(b - a) * 1000 for a, b, o in during]
    n_ok = sum(1 for r in during if r[2] == 200)
    span = healed + 1 - fault
    rows.append((f"fault +{span:.1f} s: requests, 200s, latency",
                 f"{len(during)}, {n_ok} ({n_ok / span:.0f}/s), p50 {pct(lat, 0.5):.1f} ms, "
                 f"p99 {pct(lat, 0.99):.1f} ms, max {max(lat, default=0):.0f} ms"))
    rows.append(("fault began, ended (s into the run)", f"{fault:.2f}, {healed:.2f}"))
    failed_at = [r[1] for r in bad if r[1] >= fault]
    rows.append(("failures answered from, to", f"+{min(failed_at) - fault:.2f} s, "
                 f"+{max(failed_at) - fault:.2f} s after the fault began" if failed_at else "none"))
    # Recovered at the start of the first whole second after the fault ended without a
    # failure; a later blip (a loaded machine) is counted apart, not as a longer recovery.
    after = [r for r in recs if r[1] >= healed]
    back = healed
    later = 0
    for t in sorted(r[1] for r in after if r[2] != 200):
        if t < back + 1:
            back = t
        else:
            later += 1
    if back + 1 > secs:
        rec = "not recovered (failures within the last second)"
    else:
        rec = f"{back - healed:.2f} s after the fault ended (then 1 s without a failure)"
        if later:
            rec += f"; {later} failures later"
    rows.append(("recovery", rec))
    first_ok = min((r[1] for r in after if r[2] == 200 and r[0] >= healed), default=None)
    rows.append(("first 200 to a request sent after it ended",
                 f"+{first_ok - healed:.2f} s" if first_ok is not None else "none"))
    per_s = Counter((int(r[1]), r[2] == 200) for r in recs)
    rows.append(("per second ok/failed", " ".join(
        f"{per_s[(s, True)]}/{per_s[(s, False)]}" for s in range(int(secs) + 1)
        if per_s[(s, True)] or per_s[(s, False)])))
    charge = json.load(open(charge_path))
    rows.append(("bucket tokens taken / quota used",
                 f"{charge['tokens']} / {charge['quota']} (answered 200: {len(ok)})"))
    rows.append(("reservations / leases left", f"{charge['reservations']} / {charge['leases']}"))
    charged = max(charge["tokens"], charge["quota"], charge["reservations"],
                  charge["leases"]) - len(ok)
    rows.append(("charged for failed requests",
                 f"{charged} (the most of the four above minus the 200s)" if charged > 0
                 else f"no ({charged})"))
    table(title, rows + extra)


def failures(r):
    return (" (failed: " + ", ".join(f"{k} {v}" for k, v in r["failed"].items()) + ")"
            if r["failed"] else "")


def idle_tcp_report(title, path):
    r = json.load(open(path))
    answered = [p for p in r["probes"] if isinstance(p[0], int)]
    lat = sorted(p[1] * 1000 for p in answered)
    table(title, [
        ("connections opened", f"{r['opened']}{failures(r)}"),
        (f"daemon CPU over {r['hold_s']:.1f} s",
         f"{r['cpu_s']:.2f} s ({r['cpu_s'] / r['hold_s']:.2f} of a core)"),
        ("daemon log growth", f"{r['log_bytes'] / 1e6:.1f} MB"),
        ("legitimate requests answered",
         f"{len(answered)} of {len(r['probes'])} (one a second, each given until the end)"),
        ("their latency", f"min {lat[0]:.1f} ms, max {lat[-1]:.1f} ms" if lat else "none answered"),
        ("answers and failures", " ".join(str(p[0]) for p in r["probes"])),
        ("idle connections closed by the daemon", str(r["closed_by_peer"]))])


def idle_unix_report(title, path):
    r = json.load(open(path))
    second = ("not tried" if not r["answered"] else
              f"answered in {r['second_s']:.2f} s" if r["second_answered"] else "not answered")
    table(title, [
        ("idle clients connected",
         f"{r['opened']}{failures(r)}, {r['closed_at_once']} of them closed at once"),
        ("a new client's stats answered",
         "yes" if r["answered"] else f"no, not within {r['hold_s']:.0f} s"),
        ("it waited", f"{r['waited_s']:.2f} s ({r['refused']} attempts refused" +
         (f", the last: {r['last_refusal']})" if r["refused"] else ")")),
        ("a second new client right after", second),
        ("idle clients closed by the dataplane later",
         f"{r['closed_by_peer']} (within {r['hold_s']:.0f} s)")])


def stall_report(title, events_path, calls_path, samples_path):
    events = {}
    for line in open(events_path):
        when, name = line.split()
        events[name] = float(when)
    fault, healed = events["fault"], events["healed"]
    calls = [(float(t), float(ms), o) for t, ms, o in (line.split() for line in open(calls_path))]
    samples = []
    for line in open(samples_path):
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit():
            samples.append((float(parts[0]), int(parts[1]) / 1024, int(parts[2])))
    # The stall is seen within a call's timeout and a setup's (0.55 s): the failures from 1 s on.
    fails = [ms for t, ms, o in calls if o == "error" and fault + 1 <= t < healed]
    count = Counter(o for _, _, o in calls)
    table(title, [
        ("calls sent", len(calls)),
        ("answered OK / OVER_LIMIT / error", f"{count['ok']} / {count['over']} / {count['error']}"),
        ("daemon RSS before the stop", f"{max([r for t, r, _ in samples if t < fault] or [0]):.1f} MB"),
        ("daemon RSS peak", f"{max([r for _, r, _ in samples] or [0]):.1f} MB"),
        ("daemon RSS at the end", f"{samples[-1][1] if samples else 0:.1f} MB"),
        ("failures from 1 s after the stop to SIGCONT", len(fails)),
        ("their latency", f"p50 {pct(fails, 0.5):.1f} ms, p99 {pct(fails, 0.99):.1f} ms"),
        ("most bytes queued towards Redis (ss Send-Q)", max([q for _, _, q in samples] or [0])),
        ("OVER_LIMIT before the stop", sum(1 for t, _, o in calls if o == "over" and t < fault)),
        ("OVER_LIMIT after SIGCONT (wrong)",
         sum(1 for t, _, o in calls if o == "over" and t >= healed)),
    ])


if __name__ == "__main__":
    mode, title = sys.argv[1], sys.argv[2]
    if mode == "load":
        load_report(title, *sys.argv[3:6], extra_rows(sys.argv[6:]))
    elif mode == "stall":
        stall_report(title, *sys.argv[3:6])
    elif mode == "idle-tcp":
        idle_tcp_report(title, sys.argv[3])
    else:
        idle_unix_report(title, sys.argv[3])
