#!/usr/bin/env python3
"""Convert benchmark: `gilsample convert` on a generated raw file of N events (default 1,000,000) in the
reference tool's format, then `gilsample merge` of it with the torch fixture; reports wall time, events
per second and gilsample's peak resident memory, which must stay flat whatever N is (inputs are streamed).

Usage: scripts/bench_convert.py [--events 1000000]   (after cargo build --release)
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

from benchlib import BINARY, ROOT


def write_raw(path, events, threads=8):
    t = 1795985719635000.0
    with open(path, "w") as f:
        f.write("[\n")
        for i in range(events):
            tid = 1000 + (i // 2) % threads
            name = "take_gil" if i % 2 == 0 else "drop_gil"
            ts = "%.3f" % t if i % 3 else t
            f.write('%s{"name": "%s", "ph": "X", "ts": %s, "dur": "%.3f", "pid": 999, "tid": %d}\n' % (
                "," if i else "", name, '"%s"' % ts if isinstance(ts, str) else "%.3f" % ts, 12.5, tid))
            t += 37.25
        f.write("]\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    if not os.path.exists(BINARY):
        sys.exit("build first: cargo build --release")
    work = tempfile.mkdtemp(prefix="gilsample-convert-")
    raw = os.path.join(work, "GIL_999_rank_0.json")
    write_raw(raw, args.events)
    start = time.monotonic()
    proc = subprocess.Popen([BINARY, "convert", "--input", raw, "--output", os.path.join(work, "out")],
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.monotonic() - start
    print("convert: %d events (%.1f MiB) in %.2f s = %.0f events/s, peak RSS %.1f MiB, exit %d" % (
        args.events, os.path.getsize(raw) / 2**20, elapsed, args.events / elapsed, usage.ru_maxrss / 1024,
        os.waitstatus_to_exitcode(status)))
    # merge reads every input twice (check, then write) and must stay as flat.
    torch = os.path.join(ROOT, "fixtures", "torch-profiler", "torch_cpu.pt.trace.json")
    start = time.monotonic()
    proc = subprocess.Popen([BINARY, "merge", raw, torch, "-o", os.path.join(work, "merged.json")],
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.monotonic() - start
    print("merge: %d events + the torch fixture in %.2f s = %.0f events/s, peak RSS %.1f MiB, exit %d" % (
        args.events, elapsed, args.events / elapsed, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)))


if __name__ == "__main__":
    main()
