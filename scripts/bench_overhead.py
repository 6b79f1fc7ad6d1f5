#!/usr/bin/env python3
"""Overhead benchmark: how much each GIL observer slows the target, side by side in one run.

Ways to run the same workload, alternated round by round so the drift of a shared machine hits all alike:
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

--zoo measures a set of workload shapes instead of one (docs/cost.md's first table): a producer feeding
workers through a queue with GIL-releasing work (thousands of hand-offs a second), pure spinners, PyTorch
loader threads beside a training step (when --python imports torch; skipped with the reason otherwise), two
spinners beside 398 blocked threads, and four processes at once. Each is run alone, under gilsample's
defaults, under `--no-stacks`, under the wake-only floor and under py-spy (and --baseline), in alternating
rounds; printed per workload: medians, each round's ratio, CPU, achieved rate and system calls per tick.

Usage: scripts/bench_overhead.py [--python PY] [--threads 4] [--idle 0] [--seconds 3] [--reps 3]
                                 [--rate 10khz] [--priority realtime] [--pin] [--release-every N]
                                 [--baseline OTHER_GILSAMPLE [--only-gilsample]] [--floor] [--json out.json]
       scripts/bench_overhead.py --zoo [--python PY] [--reps 7] [--seconds 3] [--pin]
                                 [--baseline OTHER_GILSAMPLE [--only-gilsample]] [--with-top] [--only NAME,...]
                                 [--variant FLAGS ...] [--shuffle SEED]
                                 [--json out.json]
Needs root, a release build (cargo build --release; for --floor and --zoo also --example wake_floor), py-spy
on PATH, and for the eBPF row bpftrace, giltruth (--giltruth PATH or $GILTRUTH; scripts/README.md) and a
Python built with --enable-shared (giltruth probes its libpython): the pyenv builds are. A --zoo run of 5
workloads, 5 observers, 7 rounds of 3 s takes ~15 min.
"""

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchlib import (BINARY, WAKE_FLOOR, add_giltruth_option, finish_workload, giltruth, python_command, require,
                      start_workload, workload_command)

# The cost zoo: (name, the workload's arguments, processes). Shapes of real jobs, not of the tuning
# workload: queue hand-offs, pure Python, native calls that keep the GIL, mostly blocked thread pools,
# several ranks on one machine.
ZOO = [
    ("queue", ["queue", "--threads", "3"], 1),
    ("spinners", ["bench", "--threads", "4"], 1),
    ("torch-loader", ["loader", "--threads", "2"], 1),
    ("2 spinners + 398 blocked", ["bench", "--threads", "2", "--idle", "398"], 1),
    ("4 processes (queue, 2 workers)", ["queue", "--threads", "2"], 4),
]


def pinned(args, role):
    """With --pin: the target on every CPU but the last, each observer on the last one."""
    if not args.pin:
        return []
    last = os.cpu_count() - 1
    return ["taskset", "-c", "0-%d" % (last - 1) if role == "target" else str(last)]


def workload_args(args):
    """The workload's arguments: the zoo entry's, or those of --workload."""
    if args.shape:
        return args.shape
    return [args.workload, "--threads", str(args.threads), "--idle", str(args.idle),
            "--release-every", str(args.release_every)]


def start_workloads(args):
    """Starts `args.processes` copies of the workload; returns them and their pids, each READY."""
    procs, pids = [], []
    for _ in range(args.processes):
        # -W: torch warns on stderr when numpy is missing, which changes nothing measured here.
        proc, pid = start_workload(
            pinned(args, "target") + workload_command(args.python, "-W", "ignore::UserWarning") + workload_args(args)
            + ["--seconds", str(args.seconds), "--start-on-stdin"], stdin=subprocess.PIPE)
        procs.append(proc)
        pids.append(pid)
    return procs, pids


def go(procs):
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()


def finish_workloads(procs):
    """The work rate of all the workload's processes together."""
    return sum(finish_workload(proc) for proc in procs)


def wait_for_lines(stream, pattern, count, seen):
    """Reads `stream` until `count` lines matched; keeps what was read in `seen`."""
    if count == 0:
        return
    for line in stream:
        seen.append(line)
        if re.search(pattern, line):
            count -= 1
            if count == 0:
                return
    raise RuntimeError("observer ended before it was attached:\n" + "".join(seen))


def observe(args, commands, attached_pattern, attached_lines=1):
    """Runs the workload under the observer processes `commands` (each with {pid} and {pids} filled in:
    one observer for all pids, or one per pid); returns the work rate, the observers' CPU use (summed)
    and everything they printed."""
    procs, pids = start_workloads(args)
    observers = []
    for command in commands(pids):
        # py-spy reports on stdout, the others on stderr: read both as one stream.
        observers.append(subprocess.Popen(pinned(args, "observer") + command, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
    seen = []
    try:
        for observer in observers:
            wait_for_lines(observer.stdout, attached_pattern, attached_lines, seen)
    except RuntimeError:
        for proc in procs + observers:
            proc.kill()
        raise
    go(procs)
    ops = finish_workloads(procs)
    cpu, statuses = 0.0, []
    for observer in observers:
        seen.append(observer.stdout.read())
        _, status, usage = os.wait4(observer.pid, 0)
        cpu += usage.ru_utime + usage.ru_stime
        statuses.append(status)
    return ops, cpu / args.seconds, "".join(seen), statuses


def run_alone(args, _):
    procs, _ = start_workloads(args)
    go(procs)
    return {"ops_per_s": finish_workloads(procs)}


def run_gilsample(args, out, binary=BINARY, extra=(), command=("record",), attached=r"recording process"):
    # A variant's own --rate or --priority (e.g. py-spy's achieved rate) stands instead of the run's.
    run_wide = [(flag, value) for flag, value in (("--rate", args.rate), ("--priority", args.priority))
                if flag not in extra]
    run_wide = [word for pair in run_wide for word in pair]
    ops, cpu, text, statuses = observe(
        args, lambda pids: [[binary] + list(command) + ["--pid", ",".join(map(str, pids))] + run_wide
                            + ["-o", out, "--force"] + list(extra)],
        attached, attached_lines=args.processes)
    if any(os.waitstatus_to_exitcode(s) != 0 for s in statuses):
        sys.exit("gilsample failed:\n" + text)
    metas = []
    for trace in [f for f in os.listdir(out) if f.startswith("GIL_")]:
        with open(os.path.join(out, trace)) as f:
            metas.append(json.load(f)["otherData"])
        os.remove(os.path.join(out, trace))
    mean = lambda values: statistics.mean(values) if values else float("nan")
    return {"ops_per_s": ops, "cpu_s_per_s": cpu,
            "rate_hz": mean([m["rate_achieved_hz"] for m in metas]),
            "min_rate_hz": min(m["rate_achieved_hz"] for m in metas),
            "stalled_reads": sum(m.get("stalled_reads", 0) for m in metas),
            "late_samples": sum(m.get("late_samples", 0) for m in metas),
            "cpu_moves": sum(m.get("sampler_moved_off_holder_cpu", 0) for m in metas),
            "syscalls_per_sample": mean([(m.get("sampler_syscalls_per_sample") or {}).get("all", float("nan"))
                                         for m in metas])}


def run_pyspy(args, out):
    def commands(pids):
        return [["py-spy", "record", "--pid", str(pid), "--rate", "10000", "--nonblocking", "--gil",
                 "--format", "raw", "-o", os.path.join(out, "pyspy-%d.txt" % pid)] for pid in pids]
    ops, cpu, text, _ = observe(args, commands, r"Sampling process")
    samples = [int(n) for n in re.findall(r"Samples: (\d+)", text)]
    return {"ops_per_s": ops, "cpu_s_per_s": cpu,
            "rate_hz": statistics.mean(samples) / args.seconds if samples else float("nan")}


def run_giltruth(args, out):
    path = os.path.join(out, "truth.jsonl")
    ops, cpu, text, _ = observe(
        args, lambda pids: [[sys.executable, args.giltruth, "record", "--pid", str(pids[0]), "--duration",
                             str(args.seconds + 1), "-o", path]], r"probes attached")
    events = re.search(r"events in window \((\d+)/s\)", text)
    return {"ops_per_s": ops, "cpu_s_per_s": cpu,
            "rate_hz": float(events.group(1)) if events else float("nan")}


def run_wake_floor(args, out):
    # One waker for all the processes, as gilsample's shared sampler thread wakes once a period for up
    # to 4 targets at 10 kHz: the floor of the schedule gilsample keeps, not of one thread per process.
    ops, cpu, text, _ = observe(
        args, lambda pids: [[WAKE_FLOOR, "--pid", ",".join(map(str, pids)), "--rate", args.rate,
                             "--priority", args.priority]], r"waking for process")
    rates = [float(r) for r in re.findall(r"\((\d+) Hz\)", text)]
    return {"ops_per_s": ops, "cpu_s_per_s": cpu, "rate_hz": statistics.mean(rates) if rates else float("nan")}


OBSERVERS = [("alone", run_alone), ("gilsample", run_gilsample), ("py-spy --gil --nonblocking", run_pyspy),
             ("giltruth eBPF uprobes", run_giltruth)]


def zoo_observers(args):
    observers = [("alone", run_alone), ("gilsample", run_gilsample),
                 ("gilsample --no-stacks", lambda a, out: run_gilsample(a, out, extra=["--no-stacks"])),
                 ("wake only, no reads", run_wake_floor), ("py-spy --gil --nonblocking", run_pyspy)]
    if args.only_gilsample:
        # An A/B of two builds: the other observers add rounds, not information.
        observers = [o for o in observers if o[0] in ("alone", "gilsample", "gilsample --no-stacks")]
    if args.baseline:
        observers.append(("gilsample baseline", lambda a, out: run_gilsample(a, out, args.baseline)))
    for flags in args.variant or []:
        observers.append(("gilsample " + flags, lambda a, out, flags=flags: run_gilsample(a, out, extra=flags.split())))
    if args.with_top:
        # `top` in plain mode (no terminal needed), a table a second, saving the trace as record does.
        observers.append(("gilsample top --lines 5", lambda a, out: run_gilsample(
            a, out, extra=["--lines", "5"], command=("top",), attached=r"watching process")))
    return observers


def paired_slowdowns(alone_runs, runs):
    """Per round: the alone run's work rate over this observer's. A round's runs are seconds apart, so
    the machine's drift (other tenants of a shared host) cancels in the ratio more than across rounds."""
    if any(not a["ops_per_s"] for a in alone_runs):
        sys.exit("the workload did no work in a round run alone: its timed window measured nothing "
                 "(a setup slower than the window? rerun it by hand with --start-on-stdin)")
    return [a["ops_per_s"] / r["ops_per_s"] if r["ops_per_s"] else float("inf") for a, r in zip(alone_runs, runs)]


def round_orders(observers, reps, shuffle_seed=None):
    """The order of the observers in each round. Rotated by default, so that no observer always runs
    first after a pause; with a seed, shuffled anew each round, so that no observer always follows the
    same one either (what one run leaves behind, a CPU's caches or a pool of exiting threads, then lands
    on every observer alike instead of on one)."""
    if shuffle_seed is None:
        return [observers[rep % len(observers):] + observers[:rep % len(observers)] for rep in range(reps)]
    rng = random.Random(shuffle_seed)
    return [rng.sample(observers, len(observers)) for _ in range(reps)]


def round_order_text(args):
    return "; order shuffled from seed %d" % args.shuffle if args.shuffle is not None else "; order rotated"


def measure(args, observers, out):
    """Every observer once per round, in `round_orders`; the runs by observer."""
    runs = {name: [] for name, _ in observers}
    for order in round_orders(observers, args.reps, args.shuffle):
        for name, run in order:
            runs[name].append(run(args, out))
    return runs


def summarise(observers, runs):
    summary = {}
    for name, _ in observers:
        med = lambda key: statistics.median(r.get(key, float("nan")) for r in runs[name])
        paired = paired_slowdowns(runs["alone"], runs[name])
        summary[name] = {"ops_per_s": med("ops_per_s"), "slowdown_ratio": statistics.median(paired),
                         "slowdown_per_round": paired, "work_kept_per_round": [1 / p for p in paired],
                         "cpu_s_per_s": med("cpu_s_per_s"), "rate_hz": med("rate_hz"), "runs": runs[name]}
    return summary


def print_table(observers, runs, summary):
    alone = summary["alone"]["ops_per_s"]
    print("| observer | target work | work kept (with ÷ without) | slowdown ratio | per round (min–max) "
          "| observer CPU s/s | achieved rate |")
    print("|---|---|---|---|---|---|---|")
    for name, _ in observers:
        s = summary[name]
        paired = s["slowdown_per_round"]
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
              "moves off the holder's CPU %s; syscalls per sample %s; work kept per round %s" % (
                  name, rates[0], statistics.median(rates), rates[-1],
                  [r["stalled_reads"] for r in runs[name]], [r["late_samples"] for r in runs[name]],
                  [r["cpu_moves"] for r in runs[name]],
                  ["%.1f" % r["syscalls_per_sample"] for r in runs[name]],
                  ["%.3f" % k for k in summary[name]["work_kept_per_round"]]))


def imports_torch(python):
    return subprocess.run(python_command(python) + ["-c", "import torch"], capture_output=True).returncode == 0


def run_zoo(args, out):
    """Every zoo workload, each with its own alternating rounds; then one line per workload."""
    only = set(args.only.split(",")) if args.only else None
    results, skipped = {}, []
    observers = zoo_observers(args)
    for name, shape, processes in ZOO:
        if only and name.split()[0] not in only and name not in only:
            continue
        if shape[0] == "loader" and not imports_torch(args.python):
            skipped.append("%s: skipped, %s does not import torch" % (name, args.python))
            print(skipped[-1], flush=True)
            continue
        args.shape, args.processes = shape, processes
        print("## %s (%s, %d process%s)" % (name, " ".join(shape), processes, "es" if processes > 1 else ""),
              flush=True)
        runs = measure(args, observers, out)
        summary = summarise(observers, runs)
        print_table(observers, runs, summary)
        results[name] = summary
    print("\nzoo, %d rounds x %.0f s, %s, gilsample at %s, priority %s%s: work kept (median), observer CPU s/s, "
          "achieved rate; for gilsample also system calls per tick" % (
              args.reps, args.seconds, args.python, args.rate, args.priority,
              "; observers pinned to a spare CPU" if args.pin else "; sharing the target's cores")
          + round_order_text(args))
    names = [n for n, _ in observers if n != "alone"]
    print("| workload | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for workload, summary in results.items():
        cells = []
        for n in names:
            s = summary[n]
            cell = "%.3f (%.2f CPU, %.0f Hz" % (1 / s["slowdown_ratio"], s["cpu_s_per_s"], s["rate_hz"])
            if n.startswith("gilsample"):
                cell += ", %.1f calls" % statistics.median(r["syscalls_per_sample"] for r in s["runs"])
            cells.append(cell + ")")
        print("| %s | %s |" % (workload, " | ".join(cells)))
    print_gaps(results)
    for line in skipped:
        print(line)
    return results


# What #26's bars compare, each paired within a round: (label, observer a, observer b), a - b.
GAPS = [("stacks and names (--no-stacks - defaults)", "gilsample --no-stacks", "gilsample"),
        ("under the floor (wake only - defaults)", "wake only, no reads", "gilsample"),
        ("under py-spy (py-spy - defaults)", "py-spy --gil --nonblocking", "gilsample"),
        ("against --baseline (baseline - defaults)", "gilsample baseline", "gilsample")]


def print_gaps(results):
    """Differences of work kept between two observers, taken within each round (both against the same
    alone run, seconds apart), then the median and the rounds' range: a positive figure is what
    gilsample's defaults lose to the other observer. Paired like this the machine's drift between
    rounds cancels, which medians taken apart leave in."""
    gaps = [g for g in GAPS if all(g[1] in s and g[2] in s for s in results.values())]
    if not gaps or not results:
        return
    print("\npaired within each round, points of work kept (median, rounds' range); positive: defaults lose")
    print("| workload | " + " | ".join(g[0] for g in gaps) + " |")
    print("|---|" + "---|" * len(gaps))
    for workload, summary in results.items():
        cells = []
        for _, a, b in gaps:
            diffs = [100 * (x - y) for x, y in zip(summary[a]["work_kept_per_round"],
                                                   summary[b]["work_kept_per_round"])]
            cells.append("%+.1f (%+.1f to %+.1f)" % (statistics.median(diffs), min(diffs), max(diffs)))
        print("| %s | %s |" % (workload, " | ".join(cells)))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=sys.executable,
                        help="the target's interpreter: a path, or sid-3.15 (any sid-X.Y[d]: that Python in the "
                             "sid root scripts/make-sid-root.sh builds, run through chroot)")
    parser.add_argument("--workload", default="bench", choices=["bench", "dispatch", "queue"],
                        help="bench: N counting spinners; dispatch: a producer feeding N workers that alternate "
                             "pure Python and hashlib (work = items done); queue: the same with short items")
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
    parser.add_argument("--zoo", action="store_true", help="measure the zoo of workload shapes (module docs)")
    parser.add_argument("--only", help="with --zoo: only these workloads (their first word, comma-separated)")
    parser.add_argument("--variant", action="append", metavar="FLAGS",
                        help="with --zoo: also gilsample with these flags (quoted, repeatable: --variant '--cpus 1')")
    parser.add_argument("--with-top", action="store_true",
                        help="with --zoo: also `gilsample top --lines 5` (what watching live costs beside record)")
    parser.add_argument("--shuffle", type=int, metavar="SEED",
                        help="a new random order of the observers each round, from SEED (printed with the "
                             "results; the default rotates the order)")
    parser.add_argument("--json")
    add_giltruth_option(parser)
    args = parser.parse_args()
    args.shape, args.processes = None, 1
    needs = [(BINARY, "cargo build --release")]
    if args.floor or args.zoo:
        needs.append((WAKE_FLOOR, "cargo build --release --example wake_floor"))
    for need, why in needs:
        require(need, why)
    if not args.only_gilsample and not args.zoo:
        args.giltruth = giltruth(args.giltruth)
    if not args.only_gilsample and not shutil.which("py-spy"):
        sys.exit("needs py-spy on PATH (pip install py-spy)")
    if not args.only_gilsample and not args.zoo and not shutil.which("bpftrace"):
        sys.exit("needs bpftrace on PATH (apt-get install bpftrace)")
    out = tempfile.mkdtemp(prefix="gilsample-overhead-")
    if args.zoo:
        results = run_zoo(args, out)
    else:
        observers = [o for o in OBSERVERS if not (args.only_gilsample and o[0] not in ("alone", "gilsample"))]
        if args.baseline:
            observers.append(("gilsample baseline", lambda a, out: run_gilsample(a, out, args.baseline)))
        if args.floor:
            observers.append(("wake only, no reads", run_wake_floor))
        runs = measure(args, observers, out)
        print("python %s, %s: %d threads + %d idle%s, %d rounds x %.0f s, medians; gilsample at %s, priority %s%s"
              % (args.python, args.workload, args.threads, args.idle,
                 ", GIL released every %d counts" % args.release_every if args.release_every else "",
                 args.reps, args.seconds, args.rate, args.priority,
                 "; observers pinned to a spare CPU" if args.pin else "") + round_order_text(args))
        results = summarise(observers, runs)
        print_table(observers, runs, results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    shutil.rmtree(out, True)


if __name__ == "__main__":
    main()
