#!/usr/bin/env python3
"""Checks that dripgate-control's tree shows its layers, one way down.

The layers are the folders control/meson.build enters with subdir(), bottom first. A source in
a layer's folder may include its own folder and the folders entered before it, never one
entered after it (tests are exempt: a test may reach above its layer). The layer table in
docs/ARCHITECTURE.md must name the same folders, top first, and every source in a folder must
be named in its row. Exit 1 with one line per problem.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
control = root / "control"
layers = re.findall(r"^subdir\('([a-z_]+)'\)", (control / "meson.build").read_text(), re.M)
rank = {name: i for i, name in enumerate(layers)}
problems = []

folders = sorted(p.name for p in control.iterdir() if p.is_dir())
for name in folders:
    if name not in rank:
        problems.append(f"control/{name}/: not entered by control/meson.build")

include = re.compile(r'#include "control/([a-z_]+)/')
for path in sorted(control.rglob("*")):
    if path.suffix not in (".h", ".cc") or "envoy" in path.parts:
        continue
    rel = path.relative_to(control)
    if len(rel.parts) == 1:
        continue  # main.cc and the daemon's own tests: the top
    if path.stem.endswith(("_test", "_fuzz", "_bench")):
        continue
    own = rel.parts[0]
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = include.match(line)
        if m and m.group(1) in rank and rank[m.group(1)] > rank[own]:
            problems.append(f"{path.relative_to(root)}:{n}: includes control/{m.group(1)}/, "
                            f"a layer above control/{own}/")

doc = (root / "docs" / "ARCHITECTURE.md").read_text()
section = doc[doc.index("### Layers"):]
section = section[:section.index("\n### ", 1)]
rows = re.findall(r"^\| [^|]+ \| `([a-z_]+)/` \| ([^|]+) \|", section, re.M)
if [r[0] for r in rows] != layers[::-1]:
    problems.append("docs/ARCHITECTURE.md: the layer table names "
                    f"{[r[0] for r in rows]}, control/meson.build enters {layers[::-1]}")
for folder, files in rows:
    for path in sorted((control / folder).glob("*")):
        if path.suffix not in (".h", ".cc") or path.stem.endswith(("_test", "_fuzz", "_bench")):
            continue
        if path.stem not in re.findall(r"`([a-z_]+)(?:\.\{h,cc\}|\.h|\.cc)`", files):
            problems.append(f"docs/ARCHITECTURE.md: the {folder}/ row does not name {path.name}")

for p in problems:
    print(p)
sys.exit(1 if problems else 0)
