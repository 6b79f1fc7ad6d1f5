#!/usr/bin/env python3
"""Sampler benchmark: what gilsample achieves and what it costs, measured side by side in one run.

For each target shape (4 threads; 32 threads = 4 spinners + 28 idle; 29 threads = 1 spinner that
nobody contends + 28 idle, which the sampler sees as quiet), runs alternate between the
workload alone and the workload with gilsample attached at the requested rate, so drift of a shared,
noisy machine hits both sides alike. Reports, per shape:
  - achieved sample rate and late-sample share (from the trace metadata),
  - gilsample CPU seconds per second of recording (user + system, from wait4),
  - the target's work rate with / without gilsample (slowdown ratio).

  - system calls per sample (the trace's sampler_syscalls_per_sample), and the share of samples
    taken at the quiet rate (samples_at_quiet_rate),
  - with --save, the same runs again saving their samples (--save-samples) side by side, and the
    stream's bytes per second,
  - with --baseline BINARY, the same runs with another gilsample build side by side (before/after).

With --soak SECONDS it instead records one long run (32 threads: 4 busy, 28 idle) and reports
gilsample's peak resident memory and the trace size: memory must stay flat however long the recording.
With --soak and --save it also saves the samples and replays them (`gilsample replay`), reporting the
stream's size and the replay's peak memory, which must stay flat too.

Usage: scripts/bench_sampler.py [--python PY] [--rate 10khz] [--seconds 3] [--reps 3] [--json out.json]
                                [--save] [--baseline BINARY] [--ab FLAG]
       scripts/bench_sampler.py --soak 600 [--save]
Needs a release build (cargo build --release); timing belongs here, never in tests.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from benchlib import BINARY, finish_workload, start_workload, workload_command


def start_bench(python, threads, idle, seconds):
    """The `bench` workload (`threads` spinners, `idle` idle threads) for `seconds`, once READY."""
    return start_workload([*workload_command(python), "bench", "--threads", str(threads), "--idle", str(idle),
                           "--seconds", str(seconds)])


def run_alone(python, threads, idle, seconds):
    proc, _ = start_bench(python, threads, idle, seconds)
    return finish_workload(proc)


def run_sampled(python, threads, idle, seconds, rate, priority="realtime", extra=(), binary=BINARY):
    proc, pid = start_bench(python, threads, idle, seconds)
    out = tempfile.mkdtemp(prefix="gilsample-bench-")
    # "{samples}" in a flag stands for a stream file in this run's own directory.
    extra = [e.replace("{samples}", os.path.join(out, "run.gilsamples")) for e in extra]
    sampler = subprocess.Popen([binary, "--pid", str(pid), "--rate", rate, "--priority", priority, "--quiet", "-o", out]
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
        # Idle threads' readings left out: counted out by the waiter counts, or every few ticks without them.
        "kernel_reads_skipped": (meta.get("kernel_reads_skipped_idle", 0) + meta.get("kernel_reads_counted_out", 0))
        / max(1, meta["thread_samples"]),
        "syscalls_per_sample": (meta.get("sampler_syscalls_per_sample") or {}).get("all", float("nan")),
        "saved_kb_per_s": meta.get("saved_sample_bytes", 0) / 1000 / recorded_s,
        "quiet_share": meta.get("samples_at_quiet_rate", 0) / max(1, samples),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=sys.executable,
                        help="the target's interpreter: a path, or sid-3.15 (any sid-X.Y[d]: that Python in the "
                             "sid root scripts/make-sid-root.sh builds, run through chroot)")
    parser.add_argument("--rate", default="10khz")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--priority", default="realtime", help="gilsample's --priority for the sampled runs")
    parser.add_argument("--soak", type=float, help="one long recording of this many seconds; report peak memory")
    parser.add_argument("--save", action="store_true",
                        help="also run gilsample saving its samples (--save-samples) in every round, side by side")
    parser.add_argument("--baseline", metavar="BINARY",
                        help="also run this gilsample build in every round, side by side (before/after a change)")
    parser.add_argument("--ab", metavar="FLAG",
                        help="also run gilsample with this extra flag in every round (e.g. --no-idle-backoff), "
                             "side by side, and report it as its own rows")
    args = parser.parse_args()
    if not os.path.exists(BINARY):
        sys.exit("build first: cargo build --release")
    if args.soak:
        soak(args)
        return

    # The last shape is quiet: one thread keeps the GIL, nobody asks for it, so the sampler runs at
    # its quiet rate (src/infer/quiet.rs; compare with --ab=--fixed-rate).
    shapes = [("4 threads", 4, 0), ("32 threads (4 busy, 28 idle)", 4, 28), ("29 threads (1 busy, 28 idle)", 1, 28)]
    variants = [("", (), BINARY)]
    if args.ab:
        variants.append((" " + args.ab, (args.ab,), BINARY))
    if args.save:
        variants.append((" --save-samples", ("--save-samples", "{samples}"), BINARY))
    if args.baseline:
        variants.append((" (baseline)", (), args.baseline))
    results = {}
    for shape, threads, idle in shapes:
        alone = []
        sampled = {name: [] for name, _, _ in variants}
        for _ in range(args.reps):
            alone.append(run_alone(args.python, threads, idle, args.seconds))
            for name, extra, binary in variants:
                sampled[name].append(run_sampled(args.python, threads, idle, args.seconds, args.rate,
                                                 args.priority, extra, binary))
        for name, _, _ in variants:
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
        "syscalls_per_sample": med("syscalls_per_sample"),
        "saved_kb_per_s": med("saved_kb_per_s"),
        "quiet_share": med("quiet_share"),
        "runs": {"alone": alone, "sampled": sampled},
    }


def report(args, results):
    print("python: %s, rate %s, priority %s, %d x %.0f s per side, medians" % (
        args.python, args.rate, args.priority, args.reps, args.seconds))
    print("| target | achieved rate | late samples | gilsample CPU s/s | target work alone | with gilsample "
          "| slowdown ratio | hand-offs seen/counted | idle reads skipped | syscalls/sample | saved KB/s "
          "| samples at the quiet rate |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, r in results.items():
        print("| %s | %.0f Hz | %.2f%% | %.3f | %.3g ops/s | %.3g ops/s | %.3f | %d / %d | %.0f%% | %.1f | %.0f | %.0f%% |" % (
            label, r["achieved_hz"], 100 * r["late_share"], r["cpu_s_per_s"], r["alone_ops_per_s"],
            r["sampled_ops_per_s"], r["slowdown_ratio"], r["handoffs_seen"], r["handoffs_counted"],
            100 * r["kernel_reads_skipped"], r["syscalls_per_sample"], r["saved_kb_per_s"],
            100 * r["quiet_share"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


def soak(args):
    proc, pid = start_bench(args.python, 4, 28, args.soak)
    out = tempfile.mkdtemp(prefix="gilsample-soak-")
    samples = os.path.join(out, "soak.gilsamples")
    save = ["--save-samples", samples] if args.save else []
    sampler = subprocess.Popen([BINARY, "--pid", str(pid), "--rate", args.rate, "--quiet", "-o", out] + save)
    finish_workload(proc)
    _, status, usage = os.wait4(sampler.pid, 0)
    path = os.path.join(out, "GIL_%d_rank_0.json" % pid)
    meta = json.load(open(path))["otherData"]
    seconds = (meta["recording_end_monotonic_ns"] - meta["recording_start_monotonic_ns"]) / 1e9
    print("soak: %.0f s at %s, 32 threads: %d samples (%.0f Hz), peak RSS %.1f MiB, trace %.1f MiB, exit %d" % (
        seconds, args.rate, meta["samples"], meta["rate_achieved_hz"], usage.ru_maxrss / 1024,
        os.path.getsize(path) / 2**20, os.waitstatus_to_exitcode(status)))
    if args.save:
        replayer = subprocess.Popen([BINARY, "replay", samples, "-o", os.path.join(out, "replayed.json"), "--quiet"])
        _, status, usage = os.wait4(replayer.pid, 0)
        print("replay: stream %.1f MiB (%.0f KB/s), peak RSS %.1f MiB, exit %d" % (
            os.path.getsize(samples) / 2**20, os.path.getsize(samples) / 1000 / seconds,
            usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)))


if __name__ == "__main__":
    main()
