#!/usr/bin/env python3
"""Why gilsample disagrees with the truth: every wrong sample of one run, grouped by what it saw.

Records one workload like scripts/bench_accuracy.py (giltruth's eBPF truth and gilsample attached to
the same process), with --save-samples, then replays the saved samples with `gilsample replay
--explain`, which writes every thread of every sample as a JSON line: the kernel state, whether the
thread holds the GIL or let it go last, the GIL's switch number, whether the thread owns the GIL's
mutex, and the classification with the rule that made it (`basis`: Direct, a rule's decision such as
RunningByGilMutex, RunningStillWaiting, RunningCounted, RunningReleased, or Ambiguous; `rule`: its
number). Each sample is then looked up in the truth and in the finished trace (where held-back `Ambiguous` stretches have
been settled), and the wrong ones are counted by

    truth>trace  kernel state  basis  decision at the thread's previous and next sample

per thread, largest classes first. This is how the causes in docs/accuracy.md, "What limits it",
were found; a rule change that targets one class shows up here as that class shrinking.

Needs what bench_accuracy.py needs (root, bpftrace, giltruth, pyenv builds with shared libpython, a
release build). Saving costs the sampler little (docs/cost.md), so the run is the benchmark's. A rule
changed since can be judged on the same samples: `--samples FILE` replays a kept stream instead of
recording (the truth and trace of that run must be beside it, as --keep leaves them).

Usage: scripts/accuracy_breakdown.py [--version 3.12] [--workload dispatch] [--rate 10khz]
                                     [--seconds 3] [--top 12] [--keep DIR] [--giltruth PATH]
                                     [-- extra gilsample flags]
"""

import argparse
import bisect
import collections
import json
import os
import subprocess
import sys
import tempfile

import bench_accuracy
from benchlib import BINARY, add_giltruth_option, giltruth

SHORT = {"take_gil": "take", "hold_gil": "hold", "drop_gil": "drop"}


def kernel_state(kernel):
    """The explained kernel state (`replay --explain`'s JSON), in a few words: running, asleep in
    futex / in a named syscall, blocked, unread."""
    if kernel is None:
        return "unread"
    if isinstance(kernel, dict):
        return "asleep in " + kernel["syscall"]
    return kernel


class Timeline:
    """One thread's intervals, looked up by time; time in no interval is `none`."""

    def __init__(self, intervals):
        self.intervals = sorted(intervals)
        self.starts = [start for start, _, _ in self.intervals]

    def at(self, t):
        i = bisect.bisect_right(self.starts, t) - 1
        if i >= 0 and self.intervals[i][0] <= t < self.intervals[i][1]:
            return SHORT.get(self.intervals[i][2], self.intervals[i][2])
        return "none"


def truth_timelines(path):
    by_tid = collections.defaultdict(list)
    for line in open(path):
        r = json.loads(line)
        by_tid[r["tid"]].append((r["start_ns"], r["end_ns"], r["state"]))
    return {tid: Timeline(ivs) for tid, ivs in by_tid.items()}


def trace_timelines(path):
    """The trace's intervals on the monotonic clock, by its own offset metadata."""
    trace = json.load(open(path))
    offset = trace["otherData"]["trace_to_monotonic_offset_ns"]
    by_tid = collections.defaultdict(list)
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("name") in SHORT:
            start = round(float(e["ts"]) * 1000) + offset
            by_tid[e["tid"]].append((start, start + round(float(e["dur"]) * 1000), e["name"]))
    return {tid: Timeline(ivs) for tid, ivs in by_tid.items()}


def explained_samples(path):
    """Each thread's explained samples (`gilsample replay --explain`), in time order: (t, line)."""
    by_tid = collections.defaultdict(list)
    for line in open(path):
        m = json.loads(line)
        by_tid[m["tid"]].append((m["t_ns"], m))
    return by_tid


def replay(samples, work_dir):
    """Replays saved samples with --explain; returns the replayed trace and the explained lines."""
    trace = os.path.join(work_dir, "replay.json")
    explained = os.path.join(work_dir, "explained.jsonl")
    subprocess.run([BINARY, "replay", samples, "-o", trace, "--force", "--quiet",
                    "--explain", explained], check=True)
    return trace, explained


def decision(m):
    # An Ambiguous sample is explained as Released until its stretch is settled: name the rule.
    return "Ambiguous" if m is None or m["basis"] == "Ambiguous" else m["state"]


def breakdown(samples, truth, trace):
    """Per thread: its sample count, and a Counter of wrong samples by class."""
    empty = Timeline([])
    result = {}
    for tid, rows in samples.items():
        classes = collections.Counter()
        for k, (t, m) in enumerate(rows):
            real = truth.get(tid, empty).at(t)
            seen = trace.get(tid, empty).at(t)
            if real == seen:
                continue
            before = rows[k - 1][1] if k > 0 else None
            after = rows[k + 1][1] if k + 1 < len(rows) else None
            classes[(real + ">" + seen, kernel_state(m["kernel"]), m["basis"],
                     "prev " + (decision(before) if before else "-"),
                     "next " + (decision(after) if after else "-"))] += 1
        result[tid] = (len(rows), classes)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", default="3.12")
    parser.add_argument("--workload", default="dispatch", choices=sorted(bench_accuracy.WORKLOADS))
    parser.add_argument("--rate", default="10khz")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--top", type=int, default=12, help="classes shown per thread")
    parser.add_argument("--keep", metavar="DIR", help="keep truth, trace, summary and samples here")
    parser.add_argument("--samples", metavar="FILE",
                        help="replay this kept stream (with truth.jsonl and summary.json beside it) instead of recording")
    parser.add_argument("extra", nargs="*", help="more gilsample flags (after --)")
    add_giltruth_option(parser)
    args = parser.parse_args()
    if not os.path.exists(BINARY):
        sys.exit("build first: cargo build --release")
    if args.samples:
        work_dir = os.path.dirname(os.path.abspath(args.samples))
        samples = args.samples
    else:
        work_dir = args.keep or tempfile.mkdtemp(prefix="gilsample-breakdown-")
        os.makedirs(work_dir, exist_ok=True)
        samples = os.path.join(work_dir, "samples.gilsamples")
        run = bench_accuracy.run_one(giltruth(args.giltruth), args.version, args.workload, args.rate,
                                     args.seconds, work_dir, tuple(args.extra) + ("--save-samples", samples))
        print("%s %s at %s: agreement %.2f%% (oracle %.2f%%), worst thread %.2f pp, achieved %.0f Hz" % (
            args.version, args.workload, args.rate, 100 * run["agreement"],
            100 * run["oracle_agreement"], run["worst_thread_err_pp"], run["achieved_hz"]))
    summary = json.load(open(os.path.join(work_dir, "summary.json")))
    truth = truth_timelines(os.path.join(work_dir, "truth.jsonl"))
    replayed, explained = replay(samples, work_dir)
    trace = trace_timelines(replayed)
    for tid, (count, classes) in sorted(breakdown(explained_samples(explained), truth, trace).items()):
        fractions = summary["threads"].get(str(tid), {}).get("truth", {})
        share = ", ".join("%s %.1f%%" % (SHORT.get(s, s), 100 * f) for s, f in fractions.items())
        wrong = sum(classes.values())
        print("\nthread %d (truth: %s): %d of %d samples wrong" % (tid, share or "not in the truth", wrong, count))
        for cls, n in classes.most_common(args.top):
            print("  %6d  %s" % (n, "  ".join(cls)))
    if not args.keep:
        print("\nfiles: %s" % work_dir)


if __name__ == "__main__":
    main()
