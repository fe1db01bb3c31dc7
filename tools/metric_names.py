#!/usr/bin/env python3
"""The metric names PromQL uses in alert rules and dashboards, and those the daemons declare.

  metric_names.py used FILE...         names the expressions in FILEs use, one a line
  metric_names.py declared ROOT        names the C/C++ sources under ROOT declare, one a line
  metric_names.py check ROOT FILE... [--allow NAME...]
                                       exit 1 naming every used name no source declares

A FILE is a Prometheus rule file (.yml/.yaml: each rule's `expr`) or a Grafana dashboard (.json:
every `expr`, and the queries of its query variables, `label_values(selector, label)`). A name
is given as its base: a histogram's `_bucket`, `_sum` and `_count` series are the histogram's
name, which is how the sources declare it. A source declares a name by holding it whole as a
string literal, `"dripgate_..."`, or as a prefix literal ending in `_` (`"dripgate_dataplane_"`)
and the rest as another literal of the same file (`name("drops_total")`); tests, fuzzers and
benches are not read, since they hold names they look for, not names they export.
"""
import json
import pathlib
import re
import sys

import yaml

KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "bool", "offset", "inf", "nan", "atan2"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
SOURCE_DIRS = ("control", "dataplane", "tools", "ebpf")
SOURCE_SUFFIXES = {".cc", ".h", ".c", ".cpp", ".hpp"}
NOT_EXPORTING = ("_test", "_fuzz", "_bench")

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_NAME_MATCHER = re.compile(r'__name__\s*=\s*"((?:\\.|[^"\\])*)"')
_GRAFANA_VAR = re.compile(r"\$\{[^}]*\}|\$\w+|\[\[\w+\]\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", re.I)
_TOKEN = re.compile(r"[0-9][0-9a-zA-Z_.]*|[a-zA-Z_:][a-zA-Z0-9_:]*")


def base_name(name):
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def names_in_expr(expr):
    """The metric names a PromQL expression selects, as written (suffixes kept)."""
    # A selector may name its metric in a matcher only: {__name__="x"}.
    names = set(_NAME_MATCHER.findall(expr))
    text = _GRAFANA_VAR.sub(" 1 ", expr)
    text = _STRING.sub('""', text)
    text = re.sub(r"\{[^}]*\}", " ", text)   # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = _GROUPING.sub(" ", text)           # label lists, not metrics
    for m in _TOKEN.finditer(text):
        token = m.group(0)
        if token[0].isdigit() or token.lower() in KEYWORDS:
            continue
        if re.match(r"\s*\(", text[m.end():]):
            continue  # a function
        names.add(token)
    return names


def names_in_grafana_query(query):
    """A query variable's names: label_values(selector, label) selects from its selector."""
    m = re.fullmatch(r"\s*label_values\((.*)\)\s*", query, re.S)
    if m:
        args = m.group(1)
        selector = args.rsplit(",", 1)[0] if "," in _STRING.sub('""', args) else ""
        return names_in_expr(selector)
    m = re.fullmatch(r"\s*query_result\((.*)\)\s*", query, re.S)
    if m:
        return names_in_expr(m.group(1))
    return set()


def exprs_in_rules(path):
    doc = yaml.safe_load(pathlib.Path(path).read_text())
    for group in (doc or {}).get("groups", []):
        for rule in group.get("rules", []):
            yield rule.get("alert") or rule.get("record"), str(rule.get("expr", ""))


def exprs_in_dashboard(path):
    def walk(node, where):
        if isinstance(node, dict):
            title = node.get("title", where) if "panels" in node or "targets" in node else where
            if isinstance(node.get("expr"), str):
                yield title, node["expr"]
            for value in node.values():
                yield from walk(value, title)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value, where)
    yield from walk(json.loads(pathlib.Path(path).read_text()), "dashboard")


def grafana_queries(path):
    doc = json.loads(pathlib.Path(path).read_text())
    for var in doc.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var.get("query")
            query = query.get("query", "") if isinstance(query, dict) else query or ""
            yield f"variable {var.get('name')}", query


def used(path):
    """(where, expr, names as written) for each expression in a rules or dashboard file."""
    if str(path).endswith(".json"):
        for where, expr in exprs_in_dashboard(path):
            yield where, expr, names_in_expr(expr)
        for where, query in grafana_queries(path):
            yield where, query, names_in_grafana_query(query)
    else:
        for where, expr in exprs_in_rules(path):
            yield where, expr, names_in_expr(expr)


def declared(root):
    root = pathlib.Path(root)
    names = set()
    for folder in SOURCE_DIRS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or path.stem.endswith(NOT_EXPORTING):
                continue
            literals = re.findall(r'"([a-zA-Z0-9_:]+)"', path.read_text(errors="replace"))
            whole = {s for s in literals if s.startswith("dripgate_")}
            prefixes = {s for s in whole if s.endswith("_")}
            rests = {s for s in literals if re.fullmatch(r"[a-z][a-z0-9_]*[a-z0-9]", s)}
            for name in (whole - prefixes) | {p + r for p in prefixes for r in rests}:
                names.add(base_name(name))
    return names


def check(root, files, allow):
    known = declared(root) | set(allow)
    problems, missing = [], set()
    for path in files:
        for where, expr, names in used(path):
            if not names and expr.strip():
                problems.append(f"{path}: {where}: no metric in {expr!r}")
            for name in sorted(names):
                if name not in known and base_name(name) not in known:
                    problems.append(f"{path}: {where}: {name}: no source under {root} declares it")
                    missing.add(base_name(name))
    if missing:
        problems.append(f"{len(missing)} names no source declares: {', '.join(sorted(missing))}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


def main(argv):
    usage = "usage: metric_names.py used FILE... | declared ROOT | check ROOT FILE... [--allow NAME...]"
    if len(argv) < 2:
        print(usage, file=sys.stderr)
        return 2
    cmd, args = argv[1], argv[2:]
    if cmd == "used" and args:
        for name in sorted({base_name(n) for path in args for _, _, ns in used(path) for n in ns}):
            print(name)
        return 0
    if cmd == "declared" and len(args) == 1:
        print("\n".join(sorted(declared(args[0]))))
        return 0
    if cmd == "check" and len(args) >= 2:
        allow = []
        if "--allow" in args:
            i = args.index("--allow")
            args, allow = args[:i], args[i + 1:]
        return check(args[0], args[1:], allow)
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
