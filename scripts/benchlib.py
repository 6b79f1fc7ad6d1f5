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

# Where the project's own checkouts find giltruth: beside them, in the shared material. Only a fallback
# for when neither --giltruth nor $GILTRUTH says where it is.
GILTRUTH_BESIDE_CHECKOUT = os.path.join(ROOT, "..", "shared", "tools", "giltruth", "giltruth")


def add_giltruth_option(parser):
    """The `--giltruth PATH` option of a benchmark that compares with or runs giltruth."""
    parser.add_argument("--giltruth", metavar="PATH",
                        help="the giltruth script, an eBPF ground-truth GIL recorder (test-only); default "
                             "$GILTRUTH, else ../shared/tools/giltruth/giltruth beside the checkout")


def giltruth(option=None):
    """The giltruth script: `option` (--giltruth), $GILTRUTH, or where the project's shared material lays
    it beside a checkout. Exits saying what it is and how to point at it when none of them exists."""
    path = option or os.environ.get("GILTRUTH") or GILTRUTH_BESIDE_CHECKOUT
    if not os.path.isfile(path):
        source = ("--giltruth" if option else "$GILTRUTH" if os.environ.get("GILTRUTH")
                  else "neither --giltruth nor $GILTRUTH was given, so the fallback beside the checkout")
        sys.exit("giltruth not found at %s (%s).\n"
                 "giltruth is an eBPF ground-truth GIL recorder (bpftrace uprobes on CPython's take_gil and\n"
                 "drop_gil, every GIL call recorded) with a comparator that scores a sampled trace against it;\n"
                 "the accuracy and overhead benchmarks compare gilsample with it. It is test-only, never a\n"
                 "dependency of gilsample, and not in this repository. Point at its script with\n"
                 "--giltruth PATH or GILTRUTH=PATH (scripts/README.md)." % (os.path.normpath(path), source))
    return path


def require(path, how):
    """Exits with what to do when a file a benchmark needs is missing."""
    if not os.path.exists(path):
        sys.exit("missing %s (%s)" % (path, how))


def start_workload(command, stdin=None, stderr=None):
    """Starts the workload `command` (interpreter, script and its arguments, or a recorder that launches
    them); returns it and its pid once it printed READY. With `stderr=subprocess.PIPE`, what it said
    there is part of the message when it does not start."""
    proc = subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE, stderr=stderr, text=True)
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        # Read before the kill: a recorder that launched the workload says why when it exits.
        said = line + (proc.stderr.read() if proc.stderr else "")
        proc.kill()
        raise SystemExit("the workload did not start: %s%s" % (" ".join(command), "\n" + said if said else ""))
    return proc, json.loads(line.split(" ", 1)[1])["pid"]


def finish_workload(proc):
    """Waits for the workload's RESULT line and exit; its work rate, in ops per second."""
    line = proc.stdout.readline()
    proc.wait()
    result = json.loads(line.split(" ", 1)[1])
    return result["ops"] / result["seconds"]
