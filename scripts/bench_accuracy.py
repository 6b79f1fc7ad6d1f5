#!/usr/bin/env python3
"""Accuracy benchmark: gilsample against exact eBPF ground truth.

For each CPython version and workload, `giltruth record` (bpftrace uprobes on take_gil/drop_gil,
test-only, not in this repository: --giltruth PATH or $GILTRUTH, scripts/README.md) launches the
workload on a private copy of libpython and records every GIL call; gilsample attaches to the same
process by pid as soon as it prints READY and records until it exits. `giltruth compare` then scores
the trace with the trace's own clock metadata (otherData.trace_to_monotonic_offset_ns), so a lag is not
hidden by alignment. One gilsample run per rate.

Reported per run: overall timeline agreement; the worst per-thread state-fraction error (pp) over
hold/take/drop; hold recall (> 1 ms); hand-offs seen/counted; achieved rate; and the agreement an
oracle sampler would reach at the same rate (`oracle`): one that knows every thread's exact state at
each tick (taken from the truth itself) and draws boundaries at midpoints like gilsample, written as a
trace and scored by the same `giltruth compare`. The gap between the two is what classification
loses; the oracle's own shortfall is what any sampler at that rate loses. Where the disagreement goes:
the largest cells of the truth x trace confusion matrix ("take>none 1.2": 1.2% of all thread-time
was in take_gil by the truth and in no GIL state in the trace), and for the worst thread, which state,
its signed error (trace minus truth) and that thread's largest cells. `--json` also keeps the oracle's
cells, the part of each that sampling at that rate loses anyway.

Needs root, bpftrace, giltruth, pyenv builds with shared libpython, and a release build of gilsample.
Usage: scripts/bench_accuracy.py [--versions 3.9,3.11,3.12,3.13] [--rates 1khz,5khz,10khz,20khz]
                                 [--workloads contention,mixed,many,fastswitch,dispatch] [--seconds 3]
                                 [--repeat N] [--ab FLAG] [--baseline OTHER_BUILD] [--json results.json]
                                 [--giltruth PATH]

With --repeat N each configuration runs N times and a row gives the median and range of each score
(hand-offs, rate and the disagreement cells are those of the median-agreement run). --ab FLAG and
--baseline BINARY add variants that run alternately with the plain build in every repetition, so a
change is measured side by side: runs of one build differ by up to about a point on `mixed`'s worst
thread and on `dispatch`, so a claim smaller than that needs several repetitions.
"""

import argparse
import bisect
import collections
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import BINARY, WORKLOAD, add_giltruth_option, giltruth, start_workload

WORKLOADS = {
    "contention": ["contention", "--threads", "4"],
    "mixed": ["released", "--threads", "2"],
    "many": ["many", "--threads", "2", "--nappers", "32"],
    "fastswitch": ["contention", "--threads", "4", "--switch-interval", "0.0005"],
    "dispatch": ["dispatch", "--threads", "4"],
    # Mostly quiet (a hasher in native code, a thread waking every 50 ms): the sampler spends most of
    # it at its quiet rate, so this is where skipping ticks could cost accuracy (--ab=--fixed-rate).
    "bursts": ["released", "--threads", "0"],
}


def pyenv_build(version):
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    dirs = sorted(glob.glob(os.path.join(root, "versions", version + ".*")))
    if not dirs:
        sys.exit("no pyenv build of %s" % version)
    lib = glob.glob(os.path.join(dirs[-1], "lib", "libpython%s*.so.1.0" % version))[0]
    return os.path.join(dirs[-1], "bin", "python" + version), lib


def write_oracle_trace(truth, period_ns, start_ns, end_ns, path):
    """What a sampler that knew each thread's exact state at every tick from start_ns to end_ns would
    write: each tick's state stands for half a period on either side, runs of one state merged."""
    by_tid = collections.defaultdict(list)
    for line in open(truth):
        r = json.loads(line)
        by_tid[r["tid"]].append((r["start_ns"], r["end_ns"], r["state"]))
    pid = json.load(open(truth + ".meta.json"))["pid"]
    events = []
    half = period_ns // 2
    for tid, intervals in by_tid.items():
        intervals.sort()
        starts = [iv[0] for iv in intervals]
        run_state, run_start = None, None
        for tick in range(start_ns, end_ns + 1, period_ns):
            i = bisect.bisect_right(starts, tick) - 1
            state = intervals[i][2] if i >= 0 and intervals[i][0] <= tick < intervals[i][1] else None
            if state != run_state:
                if run_state is not None:
                    events.append((tid, run_state, run_start, tick - half))
                run_state, run_start = state, tick - half
        if run_state is not None:
            events.append((tid, run_state, run_start, end_ns + half))
    with open(path, "w") as f:
        json.dump({"traceEvents": [{"ph": "X", "name": state, "pid": pid, "tid": tid,
                                    "ts": (start - start_ns) / 1000, "dur": (end - start) / 1000}
                                   for tid, state, start, end in events],
                   "otherData": {"trace_to_monotonic_offset_ns": start_ns}}, f)


def oracle_scores(giltruth_path, truth, trace, rate_hz, work_dir):
    meta = json.load(open(trace))["otherData"]
    oracle = os.path.join(work_dir, "oracle.json")
    summary = os.path.join(work_dir, "oracle-summary.json")
    write_oracle_trace(truth, int(1e9 / rate_hz), meta["recording_start_monotonic_ns"],
                       meta["recording_end_monotonic_ns"], oracle)
    subprocess.run([giltruth_path, "compare", truth, oracle, "--align", "meta", "--json", summary],
                   check=True, stdout=subprocess.DEVNULL)
    result = json.load(open(summary))
    overall = result["overall"]
    return overall["agreement"], worst_thread_err_pp(result), disagreements(overall["confusion_s"])


def worst_thread_err_pp(result):
    """The largest state-fraction error of any thread, over hold, take and drop."""
    return max(result["threads"][tid]["abs_err_pp"][state]
               for tid in result["threads"] for state in ("hold_gil", "take_gil", "drop_gil"))


SHORT = {"take_gil": "take", "hold_gil": "hold", "drop_gil": "drop", "none": "none"}


def disagreements(confusion_s, count=3):
    """The largest off-diagonal cells of a truth x trace confusion matrix (seconds), in percentage points
    of all the time it covers, largest first: [("take>none", 1.4), ...] ("truth state>trace state")."""
    total = sum(s for row in confusion_s.values() for s in row.values())
    cells = [(seconds, truth, trace) for truth, row in confusion_s.items()
             for trace, seconds in row.items() if truth != trace and seconds > 0]
    cells.sort(reverse=True)
    return [("%s>%s" % (SHORT[truth], SHORT[trace]), 100 * seconds / total)
            for seconds, truth, trace in cells[:count]] if total else []


def worst_thread(result):
    """Where the worst thread's error comes from: its tid, the state, the signed error (trace minus
    truth, pp) and that thread's largest disagreements."""
    tid, state = max(((tid, state) for tid in result["threads"]
                      for state in ("hold_gil", "take_gil", "drop_gil")),
                     key=lambda ts: result["threads"][ts[0]]["abs_err_pp"][ts[1]])
    thread = result["threads"][tid]
    signed = 100 * (thread["trace"][state] - thread["truth"][state])
    return {"tid": tid, "state": SHORT[state], "err_pp": signed,
            "disagreements": disagreements(thread["confusion_s"], 2)}


def describe(cells):
    return ", ".join("%s %.2f" % cell for cell in cells)


def run_one(giltruth_path, version, workload, rate, seconds, work_dir, extra=(), binary=None):
    python, lib = pyenv_build(version)
    truth = os.path.join(work_dir, "truth.jsonl")
    trace = os.path.join(work_dir, "trace.json")
    summary = os.path.join(work_dir, "summary.json")
    for path in (truth, trace, summary):
        if os.path.exists(path):
            os.remove(path)
    recorder, pid = start_workload(
        [giltruth_path, "record", "--python-lib", lib, "--private-lib", "-o", truth, "--",
         python, WORKLOAD] + WORKLOADS[workload] + ["--seconds", str(seconds)], stderr=subprocess.PIPE)
    sampler = subprocess.run([binary or BINARY, "--pid", str(pid), "--rate", rate, "--quiet", "--force",
                              "-o", trace] + list(extra))
    recorder.communicate()
    if sampler.returncode != 0 or recorder.returncode != 0:
        sys.exit("run failed: gilsample %d, giltruth %d" % (sampler.returncode, recorder.returncode))
    subprocess.run([giltruth_path, "compare", truth, trace, "--align", "meta", "--json", summary],
                   check=True, stdout=subprocess.DEVNULL)
    result = json.load(open(summary))
    meta = json.load(open(trace))["otherData"]
    overall = result["overall"]
    oracle, oracle_worst, oracle_cells = oracle_scores(giltruth_path, truth, trace, meta["rate_requested_hz"],
                                                       work_dir)
    return {
        "version": version, "workload": workload, "rate": rate,
        "agreement": overall["agreement"],
        "worst_thread_err_pp": worst_thread_err_pp(result),
        "overall_err_pp": overall["abs_err_pp"],
        "hold_recall": overall["hold_recall"],
        "hold_precision": overall.get("hold_precision"),
        "handoffs_seen": meta["handoffs_seen"], "handoffs_counted": meta["handoffs_counted"],
        "achieved_hz": meta["rate_achieved_hz"], "late_samples": meta["late_samples"],
        "scheduling": meta.get("sampler_scheduling"),
        "oracle_agreement": oracle,
        "oracle_worst_thread_err_pp": oracle_worst,
        "disagreements_pp": disagreements(overall["confusion_s"]),
        "oracle_disagreements_pp": oracle_cells,
        "worst_thread": worst_thread(result),
    }


def spread(values, fmt):
    """The median and, over several runs, the range: `99.6% (99.4–99.7)`."""
    values = sorted(values)
    text = fmt % statistics.median(values)
    if len(values) > 1:
        text += " (%s–%s)" % (fmt % values[0], fmt % values[-1])
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", default="3.9,3.11,3.12,3.13")
    parser.add_argument("--rates", default="1khz,5khz,10khz,20khz")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per configuration (and per variant); rows then give median (range)")
    parser.add_argument("--ab", metavar="FLAG",
                        help="run every configuration twice, plain and with this extra gilsample flag")
    parser.add_argument("--baseline", metavar="BINARY",
                        help="also run this other gilsample build (e.g. main's) on every configuration, "
                             "alternating with this one, for side-by-side comparisons")
    parser.add_argument("--json")
    add_giltruth_option(parser)
    args = parser.parse_args()
    if not os.path.exists(BINARY):
        sys.exit("build first: cargo build --release")
    giltruth_path = giltruth(args.giltruth)
    if args.baseline and not os.access(args.baseline, os.X_OK):
        sys.exit("--baseline %s: not an executable" % args.baseline)
    variants = [("", BINARY, ())]
    if args.ab:
        variants.append((args.ab, BINARY, (args.ab,)))
    if args.baseline:
        variants.append(("baseline", args.baseline, ()))
    results = []
    work_dir = tempfile.mkdtemp(prefix="gilsample-accuracy-")
    print("| python | workload | rate | agreement | oracle | worst thread err (pp) | oracle's worst (pp) "
          "| hold recall >1ms | hand-offs seen/counted | achieved | largest disagreements, truth>trace (pp) "
          "| worst thread: state, error (pp), its largest disagreements |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for version in args.versions.split(","):
        for workload in args.workloads.split(","):
            for rate in args.rates.split(","):
                runs = collections.defaultdict(list)
                # Variants alternate within each repetition, so a drift of the machine hits all alike.
                for _ in range(args.repeat):
                    for label, binary, extra in variants:
                        r = run_one(giltruth_path, version, workload, rate, args.seconds, work_dir, extra,
                                    binary)
                        r["flags"] = label
                        results.append(r)
                        runs[label].append(r)
                for label, _, _ in variants:
                    print_row(version, workload, rate, label, runs[label])
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump(results, f, indent=1)


def print_row(version, workload, rate, label, runs):
    """One configuration's row: medians (ranges) over its runs; the cells of its median-agreement run."""
    typical = sorted(runs, key=lambda r: r["agreement"])[len(runs) // 2]
    worst = typical["worst_thread"]
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %d / %d | %.0f Hz | %s | %s %+.2f: %s |" % (
        version, workload, (rate + " " + label).strip(),
        spread([100 * r["agreement"] for r in runs], "%.2f%%"),
        spread([100 * r["oracle_agreement"] for r in runs], "%.2f%%"),
        spread([r["worst_thread_err_pp"] for r in runs], "%.2f"),
        spread([r["oracle_worst_thread_err_pp"] for r in runs], "%.2f"),
        spread([100 * r["hold_recall"] for r in runs], "%.1f%%"),
        typical["handoffs_seen"], typical["handoffs_counted"], typical["achieved_hz"],
        describe(typical["disagreements_pp"]), worst["state"], worst["err_pp"],
        describe(worst["disagreements"])), flush=True)


if __name__ == "__main__":
    main()
