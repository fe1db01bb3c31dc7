#!/usr/bin/env python3
"""Checks that dripgate.rules_test.yml pins down every alert of dripgate.rules.yml.

  rules_mutation_test.py RULES TESTS

Each alert rule is broken, one way at a time, and its own test groups (those whose
alert_rule_test names it) must then fail under `promtool test rules`:
  * never: the expression selects nothing (its firing case must notice);
  * no wait: `for:` is 0s (a case must look before `for:` has passed);
  * each threshold a little looser: `> T` becomes `> T - 5 %`, `< T` `< T + 5 %` (0 becomes
    -1e-9 or 1e-9), `== T` always true: a case must sit just past each threshold and not fire.
The unbroken rules must pass the whole file (groups are independent: so does each alert's
share). Exit 1 naming each mutation that passed.
"""
import copy
import json
import pathlib
import re
import subprocess
import sys
import tempfile

import yaml

COMPARISON = re.compile(r"(?<![=!<>~])(==|!=|>=|<=|>|<)(\s*)(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)")


def loosened(op, threshold):
    t = float(threshold)
    if op in ("==", "!="):
        return "> -Inf"
    step = abs(t) * 0.05 if t else 1e-9
    return f"{op} {t - step if op in ('>', '>=') else t + step!r}"


def mutations(rule):
    """(what, rule') for each way of breaking one alert rule."""
    expr = rule["expr"]
    yield "never", {**rule, "expr": f"({expr}) unless on () vector(1)"}
    if rule.get("for", "0s") not in ("0", "0s"):
        yield "for 0s", {**rule, "for": "0s"}
    for m in COMPARISON.finditer(expr):
        broken = expr[: m.start()] + loosened(m.group(1), m.group(3)) + expr[m.end():]
        yield f"'{m.group(0).strip()}' loosened", {**rule, "expr": broken}


def write(folder, rules_doc, tests_doc):
    folder.mkdir()
    # JSON is YAML, and written much faster than YAML by Python.
    (folder / "rules.yml").write_text(json.dumps(rules_doc))
    (folder / "tests.yml").write_text(json.dumps({**tests_doc, "rule_files": ["rules.yml"]}))
    return folder / "tests.yml"


def passed(files):
    """Which test files pass. promtool takes many files (its start costs more than a file's
    tests) and prints `Unit Testing:  FILE` for each and `SUCCESS` under those that pass; it
    mostly waits, so four run side by side."""
    chunks = [files[i::4] for i in range(4)]
    procs = [subprocess.Popen(["promtool", "test", "rules", *map(str, c)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for c in chunks]
    verdict = {}
    for chunk, proc in zip(chunks, procs):
        out = proc.communicate()[0]
        blocks = re.split(r"^Unit Testing:\s+", out, flags=re.M)[1:]
        if len(blocks) != len(chunk):
            sys.exit(f"promtool reported {len(blocks)} of {len(chunk)} files:\n{out}")
        for f, b in zip(chunk, blocks):
            verdict[f] = b.split("\n", 1)[1].strip() == "SUCCESS"
    return [verdict[f] for f in files]


def main(rules_path, tests_path):
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    rules_doc = yaml.load(pathlib.Path(rules_path).read_text(), Loader=loader)
    tests_doc = yaml.load(pathlib.Path(tests_path).read_text(), Loader=loader)
    jobs = [("unbroken", rules_doc, tests_doc, True)]  # (label, rules, tests, should pass)
    for g, group in enumerate(rules_doc["groups"]):
        for r, rule in enumerate(group["rules"]):
            if "alert" not in rule:
                continue
            own = [t for t in tests_doc["tests"]
                   if any(a["alertname"] == rule["alert"] for a in t.get("alert_rule_test", []))]
            label = f"{rule['alert']} ({rule.get('labels', {}).get('severity', '')})"
            if not own:
                print(f"{label}: no test group names it", file=sys.stderr)
                return 1
            own_tests = {**tests_doc, "tests": own}
            for what, broken in mutations(rule):
                doc = copy.deepcopy(rules_doc)
                doc["groups"][g]["rules"][r] = broken
                jobs.append((f"{label}: {what}", doc, own_tests, False))
    problems = []
    with tempfile.TemporaryDirectory() as workdir:
        files = [write(pathlib.Path(workdir) / str(i), rules, tests)
                 for i, (_, rules, tests, _) in enumerate(jobs)]
        for (label, _, _, should_pass), ok in zip(jobs, passed(files)):
            if should_pass and not ok:
                problems.append(f"{label}: its tests fail")
            elif not should_pass and ok:
                problems.append(f"{label}: the tests still pass")
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{len(jobs)} runs, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
