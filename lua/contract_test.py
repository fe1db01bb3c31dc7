#!/usr/bin/env python3
"""The KEYS/ARGV check of tools/embed.py: the real scripts pass, and each way one side can drift
from the other fails the build with a message naming the script and the name.

usage: contract_test.py EMBED.py SCRIPT.lua...
"""
import os
import subprocess
import sys
import tempfile


def embed(embed_py: str, out_dir: str, scripts: list) -> subprocess.CompletedProcess:
    out = os.path.join(out_dir, "out.h")
    return subprocess.run([sys.executable, embed_py, "lua", out] + scripts, capture_output=True,
                          text=True)


def main() -> int:
    embed_py, scripts = sys.argv[1], sys.argv[2:]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        ok = embed(embed_py, tmp, scripts)
        if ok.returncode != 0:
            print(f"the real scripts fail: {ok.stderr}")
            return 1
        header = open(os.path.join(tmp, "out.h")).read()
        for want in ("namespace admit {", "kArgBucketCapacity = 1;", "kKeysFixed = 6;", "kKeyQuotaCur = 1;",
                     "kArgWindowsMember = 1;", "kArgWindowWindowMs = 2;"):
            if want not in header:
                print(f"generated header lacks {want!r}")
                failures += 1
        # A library function a script never calls is left out of that script's text (with its
        # comment); one it calls, and one a kept function calls, stay.
        admit_text = header[header.index("kAdmit{"):header.index("namespace admit {")]
        for name, kept in (("bucket_untake", False), ("res_find", False), ("bucket_take", True),
                           ("window_score", True)):
            if (f"local function {name}(" in admit_text) != kept:
                print(f"admit.lua's text {'lacks' if kept else 'keeps'} {name}")
                failures += 1
        admit = next(s for s in scripts if s.endswith("admit.lua"))
        text = open(admit).read()
        # (what changes in admit.lua, what the error must say)
        drifts = [
            ("ARGV[A_TOKENS]", "ARGV[2]", "ARGV[2]: index ARGV through its A_* names"),
            ("ARGV[A_TOKENS]", "ARGV[A_TOKEN]", "A_TOKEN is not declared"),
            ("@argv request_id flags", "@argv request_id spare flags",
             "A_SPARE is declared but never used"),
            ("ZCOUNT', KEYS[K_LEASES]", "ZCOUNT', KEYS[A_TOKENS]", "index KEYS through its K_* names"),
            ("@keys res_m2", "@keys bucket... res_m2", "'res_m2' after a group"),
            # A name used only by an included library counts as used; one it does not use is not.
            ("quota...(prev cur next)", "quota...(prev spare cur next)",
             "K_QUOTA_SPARE is declared but never used"),
            # The sliding windows' group after the buckets' is checked alike.
            ("ARGV[ws + A_WINDOWS_COUNT]", "ARGV[ws + A_WINDOW_COUNT]",
             "A_WINDOW_COUNT is not declared"),
            ("window...(gate limit window_ms shadow)", "window...(gate limit window_ms shadow spare)",
             "A_WINDOW_SPARE is declared but never used"),
        ]
        for old, new, message in drifts:
            assert old in text, old
            bad = os.path.join(tmp, "admit.lua")
            with open(bad, "w") as f:
                f.write(text.replace(old, new, 1))
            for lib in ("lib_bucket.lua", "lib_quota.lua", "lib_reservation.lua", "lib_window.lua"):
                src = os.path.join(os.path.dirname(admit), lib)
                with open(src) as f, open(os.path.join(tmp, lib), "w") as g:
                    g.write(f.read())
            r = embed(embed_py, tmp, [bad])
            if r.returncode == 0 or message not in r.stderr:
                print(f"{old!r} -> {new!r}: want a failure saying {message!r}, got rc "
                      f"{r.returncode}: {r.stderr.strip()}")
                failures += 1
    print(f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
