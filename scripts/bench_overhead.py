#!/usr/bin/env python3
"""Overhead benchmark: how much each GIL observer slows the target, side by side in one run.

Four ways to run the same workload (N counting spinner threads, pure Python), alternated round by round
so the drift of a shared machine hits all alike:
  - alone;
  - under gilsample at --rate (default 10 kHz);
  - under `py-spy record --rate 10000 --nonblocking --gil` (py-spy from PyPI);
  - under giltruth's eBPF uprobes on take_gil/drop_gil (the reference tool's method; needs bpftrace);
  - with --floor, also under a thread that only wakes on gilsample's schedule (same rate, same priority)
    and reads nothing (examples/wake_floor.rs): the part of gilsample's cost no cheaper tick removes.
The workload's timed window starts only once the observer says it is attached (a line on the workload's
stdin), so attach cost is not counted. Reported per observer (medians): the target's work rate, the
slowdown ratio (the median over rounds of the alone run's work rate over the observed one's, with the
rounds' range: the alone row's range is the machine's own noise), the observer's own CPU seconds per second
(user + system from wait4, its children included), and its achieved sample or event rate.

Usage: scripts/bench_overhead.py [--python PY] [--threads 4] [--idle 0] [--seconds 3] [--reps 3]
                                 [--rate 10khz] [--priority realtime] [--pin] [--release-every N]
                                 [--baseline OTHER_GILSAMPLE [--only-gilsample]] [--floor] [--json out.json]
Needs root, a release build (cargo build --release; for --floor also --example wake_floor), py-spy on
PATH, bpftrace, and a Python built with --enable-shared (giltruth probes its libpython): the pyenv builds are.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOAD = os.path.join(ROOT, "fixtures", "workloads", "gil_workload.py")
BINARY = os.path.join(ROOT, "target", "release", "gilsample")
WAKE_FLOOR = os.path.join(ROOT, "target", "release", "examples", "wake_floor")
GILTRUTH = os.environ.get("GILTRUTH", os.path.join(ROOT, "..", "shared", "tools", "giltruth", "giltruth"))


def pinned(args, role):
    """With --pin: the target on every CPU but the last, each observer on the last one."""
    if not args.pin:
        return []
    last = os.cpu_count() - 1
    return ["taskset", "-c", "0-%d" % (last - 1) if role == "target" else str(last)]


def start_workload(args):
    proc = subprocess.Popen(
        pinned(args, "target") + [args.python, WORKLOAD, args.workload, "--threads", str(args.threads), "--idle", str(args.idle),
         "--seconds", str(args.seconds), "--release-every", str(args.release_every), "--start-on-stdin"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ready = json.loads(proc.stdout.readline().split(" ", 1)[1])
    return proc, ready["pid"]


def go(proc):
    proc.stdin.write("go\n")
    proc.stdin.flush()


def finish_workload(proc):
    line = proc.stdout.readline()
    proc.wait()
    result = json.loads(line.split(" ", 1)[1])
    return result["ops"] / result["seconds"]


def wait_for_line(stream, pattern, seen):
    """Reads `stream` until a line matches; keeps what was read in `seen`."""
    for line in stream:
        seen.append(line)
        if re.search(pattern, line):
            return
    raise RuntimeError("observer ended before it was attached:\n" + "".join(seen))


def observe(args, command, attached_pattern, env=None):
    """Runs the workload under `command` (with {pid} filled in); returns work rate, the observer's CPU
    use and everything it printed."""
    proc, pid = start_workload(args)
    # py-spy reports on stdout, the others on stderr: read both as one stream.
    observer = subprocess.Popen(pinned(args, "observer") + [c.format(pid=pid) for c in command],
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env)
    seen = []
    try:
        wait_for_line(observer.stdout, attached_pattern, seen)
    except RuntimeError:
        proc.kill()
        raise
    go(proc)
    ops = finish_workload(proc)
    rest = observer.stdout.read()
    _, status, usage = os.wait4(observer.pid, 0)
    return ops, (usage.ru_utime + usage.ru_stime) / args.seconds, "".join(seen) + rest, status


def run_alone(args, _):
    proc, _ = start_workload(args)
    go(proc)
    return {"ops_per_s": finish_workload(proc)}


def run_gilsample(args, out, binary=BINARY):
    ops, cpu, _, status = observe(
        args, [binary, "--pid", "{pid}", "--rate", args.rate, "--priority", args.priority, "-o", out,
               "--force"], r"recording process")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("gilsample failed")
    trace = [f for f in os.listdir(out) if f.startswith("GIL_")][0]
    meta = json.load(open(os.path.join(out, trace)))["otherData"]
    os.remove(os.path.join(out, trace))
    return {"ops_per_s": ops, "cpu_s_per_s": cpu, "rate_hz": meta["rate_achieved_hz"],
            "stalled_reads": meta.get("stalled_reads", 0), "late_samples": meta.get("late_samples", 0),
            "cpu_moves": meta.get("sampler_moved_off_holder_cpu", 0),
            "syscalls_per_sample": (meta.get("sampler_syscalls_per_sample") or {}).get("all", float("nan"))}


def run_pyspy(args, out):
    path = os.path.join(out, "pyspy.txt")
    ops, cpu, text, _ = observe(
        args, ["py-spy", "record", "--pid", "{pid}", "--rate", "10000", "--nonblocking", "--gil",
               "--format", "raw", "-o", path], r"Sampling process")
    samples = re.search(r"Samples: (\d+)", text)
    return {"ops_per_s": ops, "cpu_s_per_s": cpu,
            "rate_hz": int(samples.group(1)) / args.seconds if samples else float("nan")}


def run_giltruth(args, out):
    path = os.path.join(out, "truth.jsonl")
    ops, cpu, text, _ = observe(
        args, [sys.executable, GILTRUTH, "record", "--pid", "{pid}", "--duration",
               str(args.seconds + 1), "-o", path], r"probes attached")
    events = re.search(r"events in window \((\d+)/s\)", text)
    return {"ops_per_s": ops, "cpu_s_per_s": cpu,
            "rate_hz": float(events.group(1)) if events else float("nan")}


def run_wake_floor(args, out):
    ops, cpu, text, _ = observe(
        args, [WAKE_FLOOR, "--pid", "{pid}", "--rate", args.rate, "--priority", args.priority],
        r"waking for process")
    rate = re.search(r"\((\d+) Hz\)", text)
    return {"ops_per_s": ops, "cpu_s_per_s": cpu, "rate_hz": float(rate.group(1)) if rate else float("nan")}


OBSERVERS = [("alone", run_alone), ("gilsample", run_gilsample), ("py-spy --gil --nonblocking", run_pyspy),
             ("giltruth eBPF uprobes", run_giltruth)]


def paired_slowdowns(alone_runs, runs):
    """Per round: the alone run's work rate over this observer's. A round's runs are seconds apart, so
    the machine's drift (other tenants of a shared host) cancels in the ratio more than across rounds."""
    return [a["ops_per_s"] / r["ops_per_s"] for a, r in zip(alone_runs, runs)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--workload", default="bench", choices=["bench", "dispatch"],
                        help="bench: N counting spinners; dispatch: a producer feeding N workers that alternate "
                             "pure Python and hashlib (work = items done)")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--idle", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rate", default="10khz")
    parser.add_argument("--priority", default="realtime")
    parser.add_argument("--release-every", type=int, default=0,
                        help="each spinner lets the GIL go every N counts (GIL traffic: what eBPF probes pay for)")
    parser.add_argument("--pin", action="store_true",
                        help="target on all CPUs but the last, observers on the last (a spare core; "
                             "for gilsample the same as --cpus)")
    parser.add_argument("--baseline", metavar="BINARY",
                        help="another gilsample build to run side by side with this one (A/B of a change)")
    parser.add_argument("--only-gilsample", action="store_true",
                        help="leave out py-spy and the eBPF probes (quicker A/B with --baseline)")
    parser.add_argument("--floor", action="store_true",
                        help="add a thread that only wakes on gilsample's schedule and reads nothing "
                             "(examples/wake_floor.rs)")
    parser.add_argument("--json")
    args = parser.parse_args()
    observers = [o for o in OBSERVERS if not (args.only_gilsample and o[0] not in ("alone", "gilsample"))]
    if args.baseline:
        observers.append(("gilsample baseline", lambda a, out: run_gilsample(a, out, args.baseline)))
    needs = [(BINARY, "cargo build --release"), (GILTRUTH, "GILTRUTH=path/to/giltruth")]
    if args.floor:
        observers.append(("wake only, no reads", run_wake_floor))
        needs.append((WAKE_FLOOR, "cargo build --release --example wake_floor"))
    for need, why in needs:
        if not os.path.exists(need):
            sys.exit("missing %s (%s)" % (need, why))
    if not args.only_gilsample and (not shutil.which("py-spy") or not shutil.which("bpftrace")):
        sys.exit("needs py-spy (pip install py-spy) and bpftrace on PATH")
    out = tempfile.mkdtemp(prefix="gilsample-overhead-")
    runs = {name: [] for name, _ in observers}
    for rep in range(args.reps):
        # Rotate the order each round so no observer always runs first after a pause.
        order = observers[rep % len(observers):] + observers[:rep % len(observers)]
        for name, run in order:
            runs[name].append(run(args, out))
    alone = statistics.median(r["ops_per_s"] for r in runs["alone"])
    print("python %s, %s: %d threads + %d idle%s, %d rounds x %.0f s, medians; gilsample at %s, priority %s%s"
          % (args.python, args.workload, args.threads, args.idle,
             ", GIL released every %d counts" % args.release_every if args.release_every else "",
             args.reps, args.seconds, args.rate, args.priority,
             "; observers pinned to a spare CPU" if args.pin else ""))
    print("| observer | target work | work kept (with ÷ without) | slowdown ratio | per round (min–max) "
          "| observer CPU s/s | achieved rate |")
    print("|---|---|---|---|---|---|---|")
    summary = {}
    for name, _ in observers:
        med = lambda key: statistics.median(r.get(key, float("nan")) for r in runs[name])
        paired = paired_slowdowns(runs["alone"], runs[name])
        summary[name] = {"ops_per_s": med("ops_per_s"), "slowdown_ratio": statistics.median(paired),
                         "slowdown_per_round": paired, "cpu_s_per_s": med("cpu_s_per_s"),
                         "rate_hz": med("rate_hz"), "runs": runs[name]}
        s = summary[name]
        if name == "alone":
            spread = [r["ops_per_s"] / alone for r in runs[name]]
            print("| alone | %.3g ops/s | 1.000 | 1.000 | %.3f–%.3f | — | — |" % (
                s["ops_per_s"], min(spread), max(spread)))
        else:
            unit = "events/s" if "giltruth" in name else "Hz"
            print("| %s | %.3g ops/s | %.3f | %.3f | %.3f–%.3f | %.3f | %.0f %s |" % (
                name, s["ops_per_s"], 1 / s["slowdown_ratio"], s["slowdown_ratio"], min(paired), max(paired),
                s["cpu_s_per_s"], s["rate_hz"], unit))
    for name, _ in observers:
        if not name.startswith("gilsample"):
            continue
        rates = sorted(r["rate_hz"] for r in runs[name])
        print("%s per run: achieved rate min %.0f / median %.0f / max %.0f Hz; stalled reads %s; late samples %s; "
              "moves off the holder's CPU %s; syscalls per sample %s" % (
                  name, rates[0], statistics.median(rates), rates[-1],
                  [r["stalled_reads"] for r in runs[name]], [r["late_samples"] for r in runs[name]],
                  [r["cpu_moves"] for r in runs[name]], [r["syscalls_per_sample"] for r in runs[name]]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    shutil.rmtree(out, True)


if __name__ == "__main__":
    main()
