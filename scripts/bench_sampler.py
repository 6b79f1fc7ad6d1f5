#!/usr/bin/env python3
"""Sampler benchmark: what gilsample achieves and what it costs, measured side by side in one run.

For each target shape (4 threads; 32 threads = 4 spinners + 28 idle), runs alternate between the
workload alone and the workload with gilsample attached at the requested rate, so drift of a shared,
noisy machine hits both sides alike. Reports, per shape:
  - achieved sample rate and late-sample share (from the trace metadata),
  - gilsample CPU seconds per second of recording (user + system, from wait4),
  - the target's work rate with / without gilsample (slowdown ratio).

With --soak SECONDS it instead records one long run (32 threads: 4 busy, 28 idle) and reports
gilsample's peak resident memory and the trace size: memory must stay flat however long the recording.

Usage: scripts/bench_sampler.py [--python PY] [--rate 10khz] [--seconds 3] [--reps 3] [--json out.json]
       scripts/bench_sampler.py --soak 600
Needs a release build (cargo build --release); timing belongs here, never in tests.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOAD = os.path.join(ROOT, "fixtures", "workloads", "gil_workload.py")
BINARY = os.path.join(ROOT, "target", "release", "gilsample")


def start_workload(python, threads, idle, seconds):
    proc = subprocess.Popen(
        [python, WORKLOAD, "bench", "--threads", str(threads), "--idle", str(idle), "--seconds", str(seconds)],
        stdout=subprocess.PIPE, text=True)
    ready = json.loads(proc.stdout.readline().split(" ", 1)[1])
    return proc, ready["pid"]


def finish_workload(proc):
    line = proc.stdout.readline()
    proc.wait()
    result = json.loads(line.split(" ", 1)[1])
    return result["ops"] / result["seconds"]


def run_alone(python, threads, idle, seconds):
    proc, _ = start_workload(python, threads, idle, seconds)
    return finish_workload(proc)


def run_sampled(python, threads, idle, seconds, rate, priority="realtime", extra=()):
    proc, pid = start_workload(python, threads, idle, seconds)
    out = tempfile.mkdtemp(prefix="gilsample-bench-")
    sampler = subprocess.Popen([BINARY, "--pid", str(pid), "--rate", rate, "--priority", priority, "--quiet", "-o", out]
                               + list(extra))
    ops_rate = finish_workload(proc)
    _, status, usage = os.wait4(sampler.pid, 0)
    sampler.returncode = os.waitstatus_to_exitcode(status)
    if sampler.returncode != 0:
        sys.exit("gilsample failed with %d" % sampler.returncode)
    trace = json.load(open(os.path.join(out, "GIL_%d_rank_0.json" % pid)))
    meta = trace["otherData"]
    recorded_s = (meta["recording_end_monotonic_ns"] - meta["recording_start_monotonic_ns"]) / 1e9
    samples, late = meta["samples"], meta["late_samples"]
    return {
        "ops_per_s": ops_rate,
        "achieved_hz": meta["rate_achieved_hz"],
        "late_share": late / max(1, samples + late),
        "cpu_s_per_s": (usage.ru_utime + usage.ru_stime) / recorded_s,
        "handoffs_seen": meta["handoffs_seen"],
        "handoffs_counted": meta["handoffs_counted"],
        "kernel_reads_skipped": meta.get("kernel_reads_skipped_idle", 0) / max(1, meta["thread_samples"]),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--rate", default="10khz")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--priority", default="realtime", help="gilsample's --priority for the sampled runs")
    parser.add_argument("--soak", type=float, help="one long recording of this many seconds; report peak memory")
    parser.add_argument("--ab", metavar="FLAG",
                        help="also run gilsample with this extra flag in every round (e.g. --no-idle-backoff), "
                             "side by side, and report it as its own rows")
    args = parser.parse_args()
    if not os.path.exists(BINARY):
        sys.exit("build first: cargo build --release")
    if args.soak:
        soak(args)
        return

    shapes = [("4 threads", 4, 0), ("32 threads (4 busy, 28 idle)", 4, 28)]
    variants = [("", ())] + ([(" " + args.ab, (args.ab,))] if args.ab else [])
    results = {}
    for shape, threads, idle in shapes:
        alone = []
        sampled = {name: [] for name, _ in variants}
        for _ in range(args.reps):
            alone.append(run_alone(args.python, threads, idle, args.seconds))
            for name, extra in variants:
                sampled[name].append(run_sampled(args.python, threads, idle, args.seconds, args.rate,
                                                 args.priority, extra))
        for name, _ in variants:
            summarize(results, shape + name, alone, sampled[name])
    report(args, results)


def summarize(results, label, alone, sampled):
    med = lambda key: statistics.median(r[key] for r in sampled)
    results[label] = {
        "alone_ops_per_s": statistics.median(alone),
        "sampled_ops_per_s": med("ops_per_s"),
        "slowdown_ratio": statistics.median(alone) / med("ops_per_s"),
        "achieved_hz": med("achieved_hz"),
        "late_share": med("late_share"),
        "cpu_s_per_s": med("cpu_s_per_s"),
        "handoffs_seen": med("handoffs_seen"),
        "handoffs_counted": med("handoffs_counted"),
        "kernel_reads_skipped": med("kernel_reads_skipped"),
        "runs": {"alone": alone, "sampled": sampled},
    }


def report(args, results):
    print("python: %s, rate %s, priority %s, %d x %.0f s per side, medians" % (
        args.python, args.rate, args.priority, args.reps, args.seconds))
    print("| target | achieved rate | late samples | gilsample CPU s/s | target work alone | with gilsample "
          "| slowdown ratio | hand-offs seen/counted | idle reads skipped |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, r in results.items():
        print("| %s | %.0f Hz | %.2f%% | %.3f | %.3g ops/s | %.3g ops/s | %.3f | %d / %d | %.0f%% |" % (
            label, r["achieved_hz"], 100 * r["late_share"], r["cpu_s_per_s"], r["alone_ops_per_s"],
            r["sampled_ops_per_s"], r["slowdown_ratio"], r["handoffs_seen"], r["handoffs_counted"],
            100 * r["kernel_reads_skipped"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


def soak(args):
    proc, pid = start_workload(args.python, 4, 28, args.soak)
    out = tempfile.mkdtemp(prefix="gilsample-soak-")
    sampler = subprocess.Popen([BINARY, "--pid", str(pid), "--rate", args.rate, "--quiet", "-o", out])
    finish_workload(proc)
    _, status, usage = os.wait4(sampler.pid, 0)
    path = os.path.join(out, "GIL_%d_rank_0.json" % pid)
    meta = json.load(open(path))["otherData"]
    seconds = (meta["recording_end_monotonic_ns"] - meta["recording_start_monotonic_ns"]) / 1e9
    print("soak: %.0f s at %s, 32 threads: %d samples (%.0f Hz), peak RSS %.1f MiB, trace %.1f MiB, exit %d" % (
        seconds, args.rate, meta["samples"], meta["rate_achieved_hz"], usage.ru_maxrss / 1024,
        os.path.getsize(path) / 2**20, os.waitstatus_to_exitcode(status)))


if __name__ == "__main__":
    main()
