"""What the benchmark scripts share: where things are, and starting and finishing the bundled workload.

The workload (fixtures/workloads/gil_workload.py) prints `READY {...}` once its threads run and, for the
`bench`, `dispatch`, `queue` and `loader` scenarios, `RESULT {"ops": ..., "seconds": ...}` at the end:
the work rate the benchmarks compare with and without an observer.
"""

import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOAD = os.path.join(ROOT, "fixtures", "workloads", "gil_workload.py")
BINARY = os.path.join(ROOT, "target", "release", "gilsample")
WAKE_FLOOR = os.path.join(ROOT, "target", "release", "examples", "wake_floor")

# The Debian sid root scripts/make-sid-root.sh builds (CPython 3.13-3.15), as the tests find it.
SID_ROOT = os.environ.get("GILSAMPLE_SID_ROOT", "/var/tmp/gilsample-sid")

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


def python_command(python):
    """The command that runs the interpreter `--python` names: a path, or a label of the tests' for
    one inside the sid root (`sid-3.15`, `sid-3.14d`), run there through chroot, so that 3.15 is a
    benchmark target like the pyenv builds."""
    if not python.startswith("sid-"):
        return [python]
    inside = "/usr/bin/python" + python[len("sid-"):]
    require(os.path.join(SID_ROOT, inside.lstrip("/")), "run scripts/make-sid-root.sh, or set GILSAMPLE_SID_ROOT")
    return ["chroot", SID_ROOT, inside]


def workload_command(python, *options):
    """The command that starts the bundled workload under `python` (see `python_command`), the
    interpreter's `options` before the script. The sid root sees only its own tree: the script is
    copied into it first."""
    if not python.startswith("sid-"):
        return [python, *options, WORKLOAD]
    command = python_command(python)
    inside = "/tmp/gilsample_bench_workload.py"
    shutil.copy(WORKLOAD, os.path.join(SID_ROOT, inside.lstrip("/")))
    return command + list(options) + [inside]


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
