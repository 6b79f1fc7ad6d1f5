#!/usr/bin/env python3
"""Where gilsample's CPU goes, by its own thread, for two builds side by side in one run.

A recording has a sampler thread (`sample-PID`, or `sample-...` shared by several targets), a writer
thread (`write-PID`) and, at its end, the thread that reads the trace back for the summary. The target's
work rate cannot show a change of a few milliseconds a second in one of them; this measures it directly:
each round starts the workload, records it with one build, and reads the CPU time (user + system) each of
gilsample's threads used over a window in the middle of the recording (/proc/PID/task/TID/schedstat, one
second after the recording began until one second before it ends), then the same with the other build.
Rounds alternate the builds, so the drift of a shared machine hits both alike. Prints per build and
thread the median and range over the rounds, in CPU milliseconds per second of window.

Usage: scripts/bench_thread_cpu.py (--baseline OTHER_GILSAMPLE | --ab FLAG) [--python PY] [--rounds 6]
                                   [--seconds 5] [--workload queue --threads 3 ...]
--ab FLAG compares this build with itself given FLAG (`--ab=--no-stacks`: what stacks cost, by thread).
The workload's arguments after --workload are gil_workload.py's (default: queue --threads 3). Needs a
release build (cargo build --release) and root (or ptrace rights over the workload).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import BINARY, require, start_workload, workload_command

def thread_cpu(pid):
    """{thread kind: CPU seconds so far} of process `pid`'s threads (those still running): each
    thread's schedstat, its time on a CPU in nanoseconds (stat's utime and stime count whole clock
    ticks, too coarse for a writer's few milliseconds a second)."""
    cpu = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except FileNotFoundError:
        return cpu
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                kind = thread_kind(f.read().strip())
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                ns = int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue
        cpu[kind] = cpu.get(kind, 0.0) + ns / 1e9
    return cpu


# gilsample's own threads, by the prefix of their names (record/mod.rs, record/target.rs).
THREAD_KINDS = ("sample", "write", "finish")


def thread_kind(name):
    """`sample-1234` -> `sample`: the thread's job, not its target. The main thread and any other
    are counted together."""
    prefix = name.split("-", 1)[0]
    return prefix if prefix in THREAD_KINDS else "main and others"


def one_round(args, command, out_dir):
    """CPU ms per second of each of the threads of `command` (a gilsample and its extra flags) over
    the window of one recording."""
    proc, pid = start_workload(workload_command(args.python, "-W", "ignore::UserWarning") + args.workload
                               + ["--seconds", str(args.seconds + 3)])
    trace = os.path.join(out_dir, "trace.json")
    recorder = subprocess.Popen([command[0], "record", "--pid", str(pid), "--duration", str(args.seconds),
                                 "-o", trace, "--force"] + command[1:], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    window = args.seconds - 2
    time.sleep(1)
    before, t0 = thread_cpu(recorder.pid), time.monotonic()
    time.sleep(window)
    after, t1 = thread_cpu(recorder.pid), time.monotonic()
    _, err = recorder.communicate()
    proc.kill()
    proc.wait()
    if recorder.returncode != 0:
        sys.exit("%s failed:\n%s" % (" ".join(command), err))
    return {kind: 1000 * (after[kind] - before.get(kind, 0.0)) / (t1 - t0) for kind in after}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    other = parser.add_mutually_exclusive_group(required=True)
    other.add_argument("--baseline", metavar="BINARY", help="the other gilsample build")
    other.add_argument("--ab", metavar="FLAG", help="compare this build with itself given FLAG (--ab=--no-stacks)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs the workload")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=5.0, help="each recording's length (the window is 2 s less)")
    parser.add_argument("--workload", nargs=argparse.REMAINDER, default=["queue", "--threads", "3"],
                        help="gil_workload.py's arguments (last on the line)")
    args = parser.parse_args()
    if args.seconds < 3:
        sys.exit("--seconds must be at least 3: the window leaves a second at either end")
    require(BINARY, "cargo build --release")
    if args.baseline:
        require(args.baseline, "the build to compare with")
        builds = [("baseline", [args.baseline]), ("this build", [BINARY])]
    else:
        builds = [("this build " + args.ab, [BINARY, args.ab]), ("this build", [BINARY])]
    seen = {name: [] for name, _ in builds}
    with tempfile.TemporaryDirectory() as out_dir:
        for round_ in range(args.rounds):
            # Alternate which build goes first: a drift within a round hits each first as often.
            order = builds if round_ % 2 == 0 else builds[::-1]
            for name, command in order:
                seen[name].append(one_round(args, command, out_dir))
    kinds = sorted({kind for rounds in seen.values() for cpu in rounds for kind in cpu})
    print("gilsample's threads, CPU ms per second of a %.0f s window, %d rounds: median (min-max); workload %s"
          % (args.seconds - 2, args.rounds, " ".join(args.workload)))
    print("| thread | " + " | ".join(name for name, _ in builds) + " |")
    print("|---|" + "---|" * len(builds))
    for kind in kinds:
        cells = []
        for name, _ in builds:
            values = [cpu.get(kind, 0.0) for cpu in seen[name]]
            cells.append("%.1f (%.1f-%.1f)" % (statistics.median(values), min(values), max(values)))
        print("| %s | %s |" % (kind, " | ".join(cells)))


if __name__ == "__main__":
    main()
