#!/usr/bin/env python3
"""The table of tools/chaos.sh's outage scenario.

  outage_report.py SAMPLES T_BACK T_DRAINED QUOTA OUTAGE_S RECORDS ADMITS SETTLES FAILS UNSETTLED
      SAMPLES: "<daemon RSS kB> <journal bytes on disk>" lines, one every 0.5 s; T_BACK: when
      Redis was started again, T_DRAINED: when nothing was pending any more (0: not seen);
      QUOTA: the quota counter Redis ended with; RECORDS: the journal's pending records when
      Redis came back; the rest from admit_settle.lua's CHAOS_RESULT line.
"""
import sys


def main():
    samples = [tuple(map(int, line.split())) for line in open(sys.argv[1])
               if len(line.split()) == 2]
    t_back, t_drained = float(sys.argv[2]), float(sys.argv[3])
    quota, outage_s, records = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    admits, settles, fails, unsettled = map(int, sys.argv[7:11])
    # What the clients were told: 100 reserved per admission, 60 charged per settled one.
    expected = admits * 100 - settles * 40
    rss = [s[0] / 1024 for s in samples]
    disk = [s[1] / 2**20 for s in samples]
    rows = [
        ("outage, load", f"{outage_s} s; wrk, 4 connections admitting and settling"),
        ("answered: admitted, settled, failed", f"{admits}, {settles}, {fails + unsettled}"),
        ("journal records pending when Redis came back", str(records)),
        ("daemon RSS: start, peak, end", f"{rss[0]:.0f} MB, {max(rss):.0f} MB, {rss[-1]:.0f} MB"),
        ("journal on disk: peak, end", f"{max(disk):.1f} MB, {disk[-1]:.2f} MB"),
        ("drain (Redis back to nothing pending)",
         f"{t_drained - t_back:.1f} s" if t_drained else "not within 20 min"),
        ("quota drift (Redis minus what clients were told)",
         f"{quota - expected} (wrk stops with its 4 requests in flight, unanswered: each a "
         f"settle, -40, or an admission, +100, the clients never heard of)"),
    ]
    width = max(len(label) for label, _ in rows)
    print("\n== a long outage under on_failure: local, Redis killed and restarted from its AOF")
    for label, value in rows:
        print(f"  {label:<{width}}  {value}")


if __name__ == "__main__":
    main()
