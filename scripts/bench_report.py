#!/usr/bin/env python3
"""How long `gilsample report` takes, and how much memory, over many rank files.

Generates N gilsample-format traces of S seconds each (4 threads handing the GIL round-robin every
--handoff-ms, each hand-off a take/hold/drop triple, as a contended recording has), one per rank,
spread over two host folders, then times `gilsample report DIR --json` and reads its peak RSS.

Usage: scripts/bench_report.py [--files 1000] [--seconds 10] [--handoff-ms 20] [--binary target/release/gilsample]

--binary defaults to the checkout's release build, wherever the script is run from.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from benchlib import BINARY


def trace(pid, rank, host, seconds, handoff_ms):
    start_us = 1_796_000_000_000_000
    threads = [pid + i for i in range(4)]
    events = []
    step = int(handoff_ms * 1000)
    t = start_us
    i = 0
    end = start_us + int(seconds * 1e6)
    while t < end:
        holder = threads[i % 4]
        waiter = threads[(i + 1) % 4]
        events.append({"name": "hold_gil", "ph": "X", "ts": t, "dur": step - 100, "pid": pid, "tid": holder})
        events.append({"name": "drop_gil", "ph": "X", "ts": t + step - 100, "dur": 100, "pid": pid, "tid": holder})
        events.append({"name": "take_gil", "ph": "X", "ts": t, "dur": step, "pid": pid, "tid": waiter})
        t += step
        i += 1
    for n, tid in enumerate(threads):
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"name": "worker-%d" % n}})
    mono = 1_000_000_000
    other = {"producer": "gilsample bench", "pid": pid, "rank": rank, "host": host,
             "recording_start_monotonic_ns": mono, "recording_end_monotonic_ns": mono + int(seconds * 1e9),
             "monotonic_to_trace_offset_ns": start_us * 1000 - mono}
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--handoff-ms", type=float, default=20.0)
    parser.add_argument("--binary", default=BINARY)
    args = parser.parse_args()
    if not os.path.exists(args.binary):
        sys.exit("%s is missing: cargo build --release, or --binary PATH" % args.binary)
    root = tempfile.mkdtemp(prefix="gilsample-bench-report-")
    try:
        total = 0
        for rank in range(args.files):
            host = "node-%d" % (rank % 2)
            folder = os.path.join(root, host)
            os.makedirs(folder, exist_ok=True)
            pid = 10_000 + rank * 10
            path = os.path.join(folder, "GIL_%d_rank_%d.json" % (pid, rank))
            with open(path, "w") as f:
                json.dump(trace(pid, rank, host, args.seconds, args.handoff_ms), f)
            total += os.path.getsize(path)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.monotonic()
        out = subprocess.run([args.binary, "report", root, "--json"], stdout=subprocess.PIPE, check=True)
        elapsed = time.monotonic() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        processes = len(json.loads(out.stdout)["processes"])
        print("files %d (%.0f MB, %.1f s each), processes reported %d" % (
            args.files, total / 1e6, args.seconds, processes))
        print("report: %.2f s wall, %.2f s CPU, peak RSS %.0f MB, %.0f MB/s" % (
            elapsed, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            after.ru_maxrss / 1024, total / 1e6 / elapsed))
        if processes != args.files:
            sys.exit("expected %d processes" % args.files)
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
