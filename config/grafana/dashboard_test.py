#!/usr/bin/env python3
"""Checks a Grafana dashboard has what Grafana needs to load and show it.

  dashboard_test.py DASHBOARD.json [PROMTOOL]

Valid JSON with a title, a uid and a schemaVersion; a datasource variable of type prometheus
that every panel and query names as `${VAR}`, so the dashboard loads on any Prometheus (by
import or by file provisioning); panels of Grafana's own types only (no plugin to install),
with unique ids and a gridPos inside the 24 columns that overlaps no other panel; each panel
but a row has targets, each with a refId unique in its panel and a non-empty `expr` whose
variables the dashboard defines (or Grafana provides); a heatmap's targets in heatmap format.
With PROMTOOL, every expr (and a query variable's selector) parses as PromQL: promtool checks
them as recording rules, Grafana's interval variables read as 5m and the others as `.*`.
Exit 1 with one line per problem.
"""
import json
import pathlib
import re
import subprocess
import sys
import tempfile

BUILTIN_PANELS = {"row", "timeseries", "stat", "gauge", "bargauge", "heatmap", "table", "text",
                  "barchart", "histogram", "piechart", "state-timeline", "status-history"}
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s",
                     "__range_ms", "__dashboard", "__from", "__to"}
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def flatten(panels):
    for panel in panels:
        yield panel
        yield from flatten(panel.get("panels", []))


def check_layout(panels, problems):
    ids, cells = {}, {}
    for p in panels:
        name = f"panel {p.get('id')} ({p.get('title')!r})"
        if not isinstance(p.get("id"), int):
            problems.append(f"{name}: no integer id")
        elif p["id"] in ids:
            problems.append(f"{name}: id also used by {ids[p['id']]}")
        else:
            ids[p["id"]] = name
        if p.get("type") not in BUILTIN_PANELS:
            problems.append(f"{name}: type {p.get('type')!r} is not one of Grafana's own")
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in "hwxy"):
            problems.append(f"{name}: gridPos needs integer h, w, x, y: {g}")
            continue
        if g["h"] < 1 or g["w"] < 1 or g["x"] < 0 or g["y"] < 0 or g["x"] + g["w"] > 24:
            problems.append(f"{name}: gridPos {g} is outside the 24 columns")
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    problems.append(f"{name}: overlaps {cells[(x, y)]} at x={x} y={y}")
                    break
                cells[(x, y)] = name
            else:
                continue
            break


def check_queries(doc, panels, problems):
    variables = doc.get("templating", {}).get("list", [])
    sources = [v["name"] for v in variables
               if v.get("type") == "datasource" and v.get("query") == "prometheus"]
    if len(sources) != 1:
        problems.append(f"templating: {len(sources)} prometheus datasource variables, not one")
        return
    source = {"type": "prometheus", "uid": "${" + sources[0] + "}"}
    defined = {v.get("name") for v in variables} | GRAFANA_VARIABLES

    def names_defined(where, text):
        for m in VARIABLE.finditer(text):
            var = next(g for g in m.groups() if g)
            if var not in defined:
                problems.append(f"{where}: ${var} is not a variable of the dashboard")

    for v in variables:
        if v.get("type") == "query":
            if v.get("datasource") != source:
                problems.append(f"variable {v.get('name')}: datasource is not {source}")
            query = v.get("query")
            query = query.get("query") if isinstance(query, dict) else query
            if not query:
                problems.append(f"variable {v.get('name')}: no query")
    for p in panels:
        if p.get("type") == "row":
            continue
        name = f"panel {p.get('id')} ({p.get('title')!r})"
        targets = p.get("targets") or []
        if not targets:
            problems.append(f"{name}: no targets")
        if p.get("datasource") != source:
            problems.append(f"{name}: datasource is not {source}")
        ref_ids = [t.get("refId") for t in targets]
        if len(set(ref_ids)) != len(ref_ids) or not all(ref_ids):
            problems.append(f"{name}: refIds {ref_ids} are not unique")
        for t in targets:
            where = f"{name} target {t.get('refId')}"
            if not isinstance(t.get("expr"), str) or not t["expr"].strip():
                problems.append(f"{where}: no expr")
                continue
            if t.get("datasource") != source:
                problems.append(f"{where}: datasource is not {source}")
            if p.get("type") == "heatmap" and t.get("format") != "heatmap":
                problems.append(f"{where}: a heatmap's target wants format heatmap")
            names_defined(where, t["expr"])


def check_promql(doc, panels, promtool, problems):
    def grafana_to_promql(text):
        return VARIABLE.sub(lambda m: "5m" if m.group(0).strip("${}[]").startswith("__") else ".*",
                            text)

    rules = []
    for p in panels:
        for t in p.get("targets") or []:
            if isinstance(t.get("expr"), str) and t["expr"].strip():
                rules.append({"record": f"panel_{p.get('id')}_{t.get('refId')}",
                              "expr": grafana_to_promql(t["expr"])})
    for v in doc.get("templating", {}).get("list", []):
        query = v.get("query")
        query = query.get("query", "") if isinstance(query, dict) else str(query or "")
        m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query, re.S)
        if v.get("type") == "query" and m:
            rules.append({"record": f"variable_{v.get('name')}", "expr": grafana_to_promql(m.group(1))})
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "dashboard_rules.yml"
        path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
        out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    if out.returncode != 0:
        problems.append(f"promtool: {(out.stdout + out.stderr).strip()}")


def main(path, promtool=None):
    problems = []
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"{path}: {e}", file=sys.stderr)
        return 1
    for key, kind in (("title", str), ("uid", str), ("schemaVersion", int), ("panels", list)):
        if not isinstance(doc.get(key), kind):
            problems.append(f"{key}: missing or not a {kind.__name__}")
    if isinstance(doc.get("schemaVersion"), int) and doc["schemaVersion"] < 36:
        problems.append(f"schemaVersion {doc['schemaVersion']}: older than Grafana 9")
    if len(str(doc.get("uid", ""))) > 40:
        problems.append("uid: longer than Grafana's 40 characters")
    panels = list(flatten(doc.get("panels", [])))
    check_layout(panels, problems)
    check_queries(doc, panels, problems)
    if promtool:
        check_promql(doc, panels, promtool, problems)
    for problem in problems:
        print(f"{path}: {problem}", file=sys.stderr)
    print(f"{path}: {len(panels)} panels, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
