#!/usr/bin/env python3
"""Moves interrupts and user threads off one CPU for a benchmark, and puts them back.

  isolate_cpu.py apply CPU STATE   # saves what it changes in STATE (JSON), prints a summary
  isolate_cpu.py restore STATE     # puts back every affinity saved in STATE

apply: every IRQ whose /proc/irq/N/smp_affinity_list includes CPU and accepts a write gets the
other CPUs; every user thread (not a kernel thread) allowed on CPU and on some other CPU loses
CPU. Threads pinned to CPU alone are left there (moving them would change what their owner asked
for): they are counted. Kernel threads are per-CPU or the kernel's to place. A thread created
while isolated inherits its parent's narrowed mask and is not restored: the window should be
short. Needs root. Poor man's isolcpus: the hypervisor's steal and the CPU's own timer tick stay.
"""
import json
import os
import sys

PF_KTHREAD = 0x00200000


def cpu_list(text):
    cpus = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def list_text(cpus):
    return ",".join(str(c) for c in sorted(cpus))


def stat_fields(tid):
    """The fields of /proc/TID/stat after the command (which may hold spaces and parentheses):
    [0] is field 3 (state), so field N is [N - 3]."""
    with open(f"/proc/{tid}/stat") as f:
        stat = f.read()
    return stat[stat.rindex(")") + 2:].split()


def identity(tid):
    """(is a kernel thread, start time): the start time tells a thread from a later one that
    reuses its id."""
    fields = stat_fields(tid)
    return bool(int(fields[9 - 3]) & PF_KTHREAD), fields[22 - 3]


def apply(cpu, state_path):
    online = cpu_list(open("/sys/devices/system/cpu/online").read())
    others = online - {cpu}
    if cpu not in online or not others:
        sys.exit(f"isolate_cpu: CPU {cpu} is not online, or is the only one")
    state = {"irqs": {}, "threads": {}}
    irq_left = 0
    for irq in sorted(os.listdir("/proc/irq")):
        path = f"/proc/irq/{irq}/smp_affinity_list"
        try:
            old = open(path).read().strip()
        except OSError:
            continue
        if cpu not in cpu_list(old):
            continue
        new = cpu_list(old) - {cpu} or others
        try:
            with open(path, "w") as f:
                f.write(list_text(new))
        except OSError:
            irq_left += 1  # per-CPU or kernel-managed: not movable
            continue
        state["irqs"][path] = old
    moved = pinned = 0
    me = os.getpid()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in map(int, tids):
            try:
                kernel, start = identity(tid)
                if tid == me or kernel:
                    continue
                old = os.sched_getaffinity(tid)
                if cpu not in old:
                    continue
                if old == {cpu}:
                    pinned += 1
                    continue
                os.sched_setaffinity(tid, old - {cpu})
                state["threads"][str(tid)] = {"cpus": sorted(old), "start": start}
                moved += 1
            except (OSError, ValueError):
                continue  # gone meanwhile
    with open(state_path, "w") as f:
        json.dump(state, f)
    print(f"isolated CPU {cpu}: {len(state['irqs'])} IRQs and {moved} threads moved off; "
          f"{irq_left} IRQs not movable, {pinned} threads pinned to it left")


def restore(state_path):
    try:
        state = json.load(open(state_path))
    except (OSError, ValueError):
        return
    for path, old in state["irqs"].items():
        try:
            with open(path, "w") as f:
                f.write(old)
        except OSError:
            pass
    for tid, saved in state["threads"].items():
        try:
            if identity(int(tid))[1] == saved["start"]:
                os.sched_setaffinity(int(tid), set(saved["cpus"]))
        except OSError:
            pass  # the thread has ended
    os.unlink(state_path)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "apply":
        apply(int(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "restore":
        restore(sys.argv[2])
    else:
        sys.exit(__doc__)
