"""What the benchmark scripts share: where things are, and starting and finishing the bundled workload.

The workload (fixtures/workloads/gil_workload.py) prints `READY {...}` once its threads run and, for the
`bench`, `dispatch`, `queue` and `loader` scenarios, `RESULT {"ops": ..., "seconds": ...}` at the end:
the work rate the benchmarks compare with and without an observer.
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOAD = os.path.join(ROOT, "fixtures", "workloads", "gil_workload.py")
BINARY = os.path.join(ROOT, "target", "release", "gilsample")
WAKE_FLOOR = os.path.join(ROOT, "target", "release", "examples", "wake_floor")


def giltruth():
    """The eBPF ground-truth recorder (test-only, never a product dependency): $GILTRUTH, or where the
    project's shared material lays it beside a checkout (../shared/tools/giltruth)."""
    return os.environ.get("GILTRUTH", os.path.join(ROOT, "..", "shared", "tools", "giltruth", "giltruth"))


def require(path, how):
    """Exits with what to do when a file a benchmark needs is missing."""
    if not os.path.exists(path):
        sys.exit("missing %s (%s)" % (path, how))


def start_workload(command, stdin=None):
    """Starts the workload `command` (interpreter, script and its arguments); returns it and its pid
    once it printed READY."""
    proc = subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise SystemExit("the workload did not start: %s" % " ".join(command))
    return proc, json.loads(line.split(" ", 1)[1])["pid"]


def finish_workload(proc):
    """Waits for the workload's RESULT line and exit; its work rate, in ops per second."""
    line = proc.stdout.readline()
    proc.wait()
    result = json.loads(line.split(" ", 1)[1])
    return result["ops"] / result["seconds"]
