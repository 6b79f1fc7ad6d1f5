#!/usr/bin/env python3
"""Does the sampler's cost follow the threads that move, or the threads the target has?

Targets of 2 pure-Python spinners beside N threads blocked in `threading.Event.wait` (--idle, default
3 and 398: 5 threads against 400), every core busy and, with --pin, the target on one CPU and
gilsample on another (`--cpus`). The runs alternate target by target, round by round, so the drift of
a shared machine hits each alike. gilsample records a window of --seconds in the middle of the target's
run (`--duration`): the target's start (the first walk of 400 threads) and its end (400 threads woken
to exit, walked as they go) are outside it, so the rate measured is the steady state's.

Reported per target and placement (medians over the rounds, with the range): the achieved rate, late
ticks, ticks whose idle threads had to be read after all (`counted_out_refuted`: the waiter counts did
not rule them out however often retried) and ticks that read them as the cheaper way
(`counted_out_read_instead`: few idle threads; "—" for a build before that count), system calls per tick
and the sampler's CPU seconds per second, and that CPU against the first target's (#26's bar: 400
threads at most twice what 5 cost). With --baseline another build records the same targets in the same
rounds, the two builds taking turns going first, for a before/after of a sampler change.

With --wake-every S each target also has a thread that sleeps S seconds at a time (idle between its
wake-ups, which the waiter counts then cannot rule out: refuted ticks).

Usage: scripts/bench_threads.py [--python PY] [--idle 3,398] [--seconds 3] [--reps 5] [--rate 10khz] [--pin]
                                [--wake-every S] [--baseline OTHER_GILSAMPLE]
Needs root (the real-time sampler) and a release build (cargo build --release).
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

from benchlib import BINARY, require, start_workload, workload_command


def record_window(args, idle, pinned, out, binary):
    """One target run with a window of it recorded by `binary`; the trace's figures and gilsample's CPU
    s/s."""
    target = (["taskset", "-c", "0"] if pinned else []) + [
        *workload_command(args.python), "bench", "--threads", "2", "--idle", str(idle),
        # Long enough that the window ends before the threads are told to stop.
        "--seconds", str(args.seconds * 2 + 2)]
    if args.wake_every:
        target += ["--wake-every", str(args.wake_every)]
    proc, pid = start_workload(target)
    for old in glob.glob(os.path.join(out, "GIL_*")):
        os.remove(old)
    command = [binary, "record", "--pid", str(pid), "--rate", args.rate, "--duration", str(args.seconds),
               "-o", out, "--force"] + (["--cpus", str(os.cpu_count() - 1)] if pinned else [])
    sampler = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    said = sampler.stderr.read()
    _, status, usage = os.wait4(sampler.pid, 0)
    proc.stdout.read()
    proc.wait()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("gilsample failed:\n" + said)
    with open(glob.glob(os.path.join(out, "GIL_*.json"))[0]) as f:
        meta = json.load(f)["otherData"]
    return {"rate_hz": meta["rate_achieved_hz"], "late": meta.get("late_samples", 0),
            "refuted": meta.get("counted_out_refuted", 0),
            "read_instead": meta.get("counted_out_read_instead"),
            "calls": meta["sampler_syscalls_per_sample"]["all"],
            "cpu_s_per_s": (usage.ru_utime + usage.ru_stime) / args.seconds}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=sys.executable,
                        help="the target's interpreter: a path, or sid-3.15 (any sid-X.Y[d]: that Python in the "
                             "sid root scripts/make-sid-root.sh builds, run through chroot)")
    parser.add_argument("--idle", default="3,398", help="blocked threads beside the 2 spinners, one target each")
    parser.add_argument("--wake-every", type=float, default=0.0, metavar="S",
                        help="add to each target a thread that sleeps S seconds at a time: idle between wake-ups, "
                             "each of which the waiter counts cannot rule out (refuted ticks)")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rate", default="10khz")
    parser.add_argument("--pin", action="store_true", help="also with the target on CPU 0, gilsample on the last")
    parser.add_argument("--baseline", metavar="BINARY",
                        help="another gilsample build, run next to this one on the same targets each round (the two "
                             "take turns going first)")
    args = parser.parse_args()
    require(BINARY, "cargo build --release")
    if args.baseline:
        require(args.baseline, "--baseline names the other build's gilsample binary")
    builds = [("this build", BINARY)] + ([("baseline", args.baseline)] if args.baseline else [])
    targets = [int(n) for n in args.idle.split(",")]
    placements = [False, True] if args.pin else [False]
    runs = {(idle, pinned, build): [] for idle in targets for pinned in placements for build, _ in builds}
    with tempfile.TemporaryDirectory() as out:
        for rep in range(args.reps):
            # The two builds take turns going first: a run can leave the machine warmer or busier for
            # the one after it, and a fixed order would credit that to one build.
            order = builds if rep % 2 == 0 else builds[::-1]
            for (idle, pinned, build) in [(i, p, b) for i in targets for p in placements for b, _ in order]:
                binary = dict(builds)[build]
                runs[(idle, pinned, build)].append(record_window(args, idle, pinned, out, binary))
                threads = idle + 3 + bool(args.wake_every)
                print("round %d, %d threads, %s, %s: %s" % (rep + 1, threads, "spare core" if pinned else "busy",
                                                            build, runs[(idle, pinned, build)][-1]), flush=True)
    print("\n%d rounds, a %.0f s window mid-run at %s, %s: median (range)" % (
        args.reps, args.seconds, args.rate, args.python))
    print("| target | cores | build | achieved rate | late ticks | refuted ticks | idle read instead | calls per tick | sampler CPU s/s"
          " | CPU ÷ first |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for build, _ in builds:
        for pinned in placements:
            first = None
            for idle in targets:
                rs = runs[(idle, pinned, build)]
                col = lambda key: [r[key] for r in rs]
                cpu = statistics.median(col("cpu_s_per_s"))
                instead = col("read_instead")
                instead = "—" if None in instead else "%.0f" % statistics.median(instead)
                first = first or cpu
                print("| 2 spinners + %d blocked%s | %s | %s | %.0f Hz (%.0f–%.0f) | %.0f | %.0f | %s | %.1f | %.2f (%.2f–%.2f)"
                      " | %.2f |" % (
                          idle, " + a waker" if args.wake_every else "", "one spare" if pinned else "all busy", build,
                          statistics.median(col("rate_hz")),
                          min(col("rate_hz")), max(col("rate_hz")), statistics.median(col("late")),
                          statistics.median(col("refuted")), instead, statistics.median(col("calls")), cpu,
                          min(col("cpu_s_per_s")), max(col("cpu_s_per_s")), cpu / first))


if __name__ == "__main__":
    main()
