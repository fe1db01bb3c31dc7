#!/usr/bin/env python3
"""Fails when a function outside the tests is longer than a limit (120 lines by default).

usage: function_length.py ROOT [--limit N]

Reads every .c, .cc and .h file git would ship below ROOT's code folders, tests, fuzzers and
benchmarks aside, with comments and literals blanked; a function is a brace block opened at
namespace or class scope after a parameter list (a lambda or a block inside a function counts
toward the function around it). Prints `path:line: N lines: signature` for each one too long.
A scan by braces, not a parser: it is meant for this tree's clang-formatted code.
"""
import pathlib
import re
import sys

FOLDERS = ("common", "config", "control", "dataplane", "ebpf", "tools")
SKIP = ("_test.", "_fuzz.", "_bench.")


def blank(src):
    """The source with comments and string/char literals emptied, newlines kept."""
    out, i, n = [], 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
            continue
        m = re.match(r'R"([^(]*)\(', src[i:i + 40])
        if m:
            end = ")" + m.group(1) + '"'
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
            continue
        c = src[i]
        if c in "\"'" and not (c == "'" and i > 0 and src[i - 1].isalnum()):  # 1'000 separators
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


SCOPE = re.compile(r"\b(namespace|class|struct|union|enum)\b[^()]*$")
SIGNATURE = re.compile(r"\)\s*(const|noexcept|override|final|mutable|&|\s|->\s*[\w:<>,\s*&]+)*$")
INIT_LIST = re.compile(r"\)\s*:\s*\w")


def long_functions(path, limit):
    s = blank(path.read_text())
    stack, last = [], 0
    for m in re.finditer(r"[{};]", s):
        ch, pos = m.group(), m.start()
        if ch == "{":
            head = s[last:pos].strip()
            kind = "block"
            if not any(k == "function" for k, _, _ in stack):
                if SCOPE.search(head) or head.startswith("extern"):
                    kind = "scope"
                elif SIGNATURE.search(head) or INIT_LIST.search(head):
                    kind = "function"
            lead = len(s[last:pos]) - len(s[last:pos].lstrip())
            start = s.count("\n", 0, last + lead) + 1
            stack.append((kind, start, head))
        elif ch == "}" and stack:
            kind, start, head = stack.pop()
            end = s.count("\n", 0, pos) + 1
            if kind == "function" and end - start + 1 > limit:
                yield start, end - start + 1, re.sub(r"\s+", " ", head)[:100]
        last = pos + 1


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-")
                        else ".")
    limit = int(sys.argv[sys.argv.index("--limit") + 1]) if "--limit" in sys.argv else 120
    bad = 0
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".c", ".cc", ".h") or any(k in path.name for k in SKIP):
                continue
            if "envoy" in path.parts:
                continue
            for line, n, head in long_functions(path, limit):
                print(f"{path.relative_to(root)}:{line}: {n} lines: {head}")
                bad += 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
