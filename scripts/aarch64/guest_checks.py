"""The checks scripts/test-aarch64.sh runs inside its arm64 guest, with the guest's Python (3.11).

Each mirrors a live x86_64 test of tests/live_record.rs, against a real arm64 CPython under a real
arm64 kernel: the aarch64 gilsample binary reads the target's memory, its /proc files and its glibc
words exactly as it would on a Kunpeng server. Every workload signals readiness with its READY line and
gilsample with its first stderr line; no check waits for a duration to be long enough. Each prints one
line, `@@ PASS name` or `@@ FAIL name: why`, and the last line is `@@ N passed, N failed`.

What the arm64 kernel and glibc showed (the /proc syscall lines, the GIL's words) is written under
--capture, which the host copies into fixtures/aarch64/ for the regression tests that run on x86_64.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

# Generous bounds for an emulated machine; they stop a hung step, they never decide a result.
STEP_TIMEOUT = 600
POLL_LIMIT = 200


class CheckFailed(Exception):
    pass


def check(condition, why):
    if not condition:
        raise CheckFailed(why)


class Python:
    """One interpreter under test: the command that starts it and where it sees the workload."""

    def __init__(self, label, command, workload):
        self.label = label
        self.command = command
        self.workload = workload

    def workload_command(self, args):
        return self.command + [self.workload] + list(args)


class Workload:
    """A running scenario of gil_workload.py, started and read up to its READY line."""

    def __init__(self, python, args, stdin=subprocess.DEVNULL):
        self.child = subprocess.Popen(python.workload_command(args), stdin=stdin, stdout=subprocess.PIPE,
                                      text=True)
        line = self.child.stdout.readline()
        check(line.startswith("READY "), "workload did not get ready: %r" % line)
        info = json.loads(line[len("READY "):])
        self.pid = info["pid"]
        self.threads = info["threads"]

    def close(self):
        if self.child.poll() is None:
            self.child.kill()
        self.child.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Trace:
    def __init__(self, path):
        with open(path) as f:
            self.value = json.load(f)  # a truncated or partial file fails here
        self.other = self.value["otherData"]
        self.events = [e for e in self.value["traceEvents"] if e.get("ph") == "X"]

    @staticmethod
    def single(directory):
        names = os.listdir(directory)
        check(not any(n.endswith(".partial") for n in names), "partial files left: %s" % names)
        traces = [n for n in names if n.startswith("GIL_") and n.endswith(".json")]
        check(len(traces) == 1, "expected one trace in %s: %s" % (directory, names))
        return Trace(os.path.join(directory, traces[0]))

    def total(self, tid, name):
        return sum(e["dur"] for e in self.events if e["tid"] == tid and e["name"] == name)

    def summary(self, threads):
        """Each thread's time per state, and the recording's metadata: what a failure is read from."""
        totals = {name: {state: self.total(tid, state) for state in ("take_gil", "hold_gil", "drop_gil")}
                  for name, tid in threads.items()}
        return json.dumps({"totals_us": totals, "otherData": self.other}, indent=1, sort_keys=True) + "\n"

    def span_us(self):
        return (self.other["recording_end_monotonic_ns"] - self.other["recording_start_monotonic_ns"]) / 1000.0


class Checks:
    def __init__(self, args):
        self.gilsample = args.gilsample
        self.capture = args.capture
        self.passed = 0
        self.failed = 0

    def run_gilsample(self, args, out_dir):
        done = subprocess.run([self.gilsample] + args + ["-o", out_dir, "--quiet"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=STEP_TIMEOUT)
        check(done.returncode == 0, "gilsample %s exited %d: %s" % (" ".join(args), done.returncode,
                                                                    done.stderr.strip()))
        return done

    def info(self, pid):
        done = subprocess.run([self.gilsample, "info", "--pid", str(pid)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=STEP_TIMEOUT)
        check(done.returncode == 0, "gilsample info exited %d: %s" % (done.returncode, done.stderr.strip()))
        return done.stdout

    def run(self, name, fn, *args):
        start = time.monotonic()
        try:
            fn(*args)
        except CheckFailed as e:
            self.failed += 1
            print("@@ FAIL %s: %s" % (name, e), flush=True)
            return
        except Exception:  # a crash of a check is a failure of it, with its traceback to read
            self.failed += 1
            print("@@ FAIL %s: %s" % (name, traceback.format_exc().replace("\n", " | ")), flush=True)
            return
        self.passed += 1
        print("@@ PASS %s (%.0f s)" % (name, time.monotonic() - start), flush=True)

    # --- the checks, each like its namesake in tests/live_record.rs ---

    def contention(self, python):
        with Workload(python, ["contention", "--threads", "3"]) as w, tempfile.TemporaryDirectory() as d:
            self.run_gilsample(["--pid", str(w.pid), "--duration", "2", "--rate", "10khz"], d)
            trace = Trace(os.path.join(d, "GIL_%d_rank_0.json" % w.pid))
            self.save(python, "contention-summary.json", trace.summary(w.threads))
            tids = set(w.threads.values())
            for e in trace.events:
                check(e["tid"] in tids, "tid %d is not a thread of the target (%s)" % (e["tid"], sorted(tids)))
                check(e["dur"] > 0, "empty event %s" % e)
            hold = 0.0
            for i in range(3):
                tid = w.threads["spinner-%d" % i]
                check(trace.total(tid, "hold_gil") > 0, "spinner-%d never held the GIL" % i)
                check(trace.total(tid, "take_gil") > 0, "spinner-%d never waited for the GIL" % i)
                hold += trace.total(tid, "hold_gil")
            # The emulated guest samples far below 10 kHz, and gaps of more than four periods stay gaps
            # in a trace by design, so the share is taken of the time the spinners were seen in a GIL
            # state, not of the span: at every sampled moment one of them holds the GIL.
            seen = max(sum(trace.total(w.threads["spinner-%d" % i], n) for n in ("take_gil", "hold_gil", "drop_gil"))
                       for i in range(3))
            check(hold > 0.5 * seen, "workers held the GIL %.0f us of the %.0f us they were seen" % (hold, seen))
            woke_twice = trace.other["ambiguous_stretches_in_take_after_two_wakeups"]
            in_call = trace.other["ambiguous_stretches_in_gil_call"]
            check(woke_twice <= in_call, "%d stretches after two wake-ups, %d in a GIL call" % (woke_twice, in_call))
            check(trace.other["pid"] == w.pid, "the trace names pid %s" % trace.other["pid"])
            version = trace.other["python_version"]
            check(version.startswith(python.label.split("-")[-1]), "the trace says Python %s" % version)
            check(trace.other["samples"] > 0, "no samples")
            print("@@ note %s contention: %.0f Hz achieved of %.0f, workers held %.0f of %.0f ms seen, layout %s" % (
                python.label, trace.other["rate_achieved_hz"], trace.other["rate_requested_hz"], hold / 1000,
                seen / 1000, trace.other["layout_source"]), flush=True)

    def lone_sleeper_never_waits(self, python):
        with Workload(python, ["sleeper"]) as w, tempfile.TemporaryDirectory() as d:
            self.run_gilsample(["--pid", str(w.pid), "--duration", "1"], d)
            trace = Trace.single(d)
            takes = [e for e in trace.events if e["name"] == "take_gil"]
            check(not takes, "a single sleeping thread waited for the GIL: %s" % takes[:3])
            check(trace.other["thread_samples"] > 0, "no thread samples")

    def gil_free_calls_are_released(self, python):
        with Workload(python, ["released", "--threads", "2"]) as w, tempfile.TemporaryDirectory() as d:
            self.run_gilsample(["--pid", str(w.pid), "--duration", "2"], d)
            trace = Trace.single(d)
            span = trace.span_us()
            for name in ("sleeper", "hasher"):
                tid = w.threads[name]
                gil = sum(trace.total(tid, n) for n in ("take_gil", "hold_gil", "drop_gil"))
                check(gil < 0.5 * span, "%s spent %.0f us of %.0f us in GIL states" % (name, gil, span))
            check(trace.total(w.threads["spinner-0"], "take_gil") > 0, "spinner-0 never waited")

    def launch_records_from_the_start(self, python):
        with tempfile.TemporaryDirectory() as d:
            cmd = [self.gilsample, "--quiet", "-o", d, "--"] + python.workload_command(
                ["short", "--threads", "2", "--seconds", "0.5"])
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  timeout=STEP_TIMEOUT)
            check(done.returncode == 0, "launch failed (%d): %s" % (done.returncode, done.stderr.strip()))
            ready = done.stdout.strip()
            check(ready.startswith("READY "), "no READY line: %r" % ready)
            info = json.loads(ready[len("READY "):])
            trace = Trace.single(d)
            check(trace.other["end_reason"] == "TargetExited", "end_reason %s" % trace.other["end_reason"])

            def first(tid):
                return min((e["ts"] for e in trace.events if e["tid"] == tid), default=float("inf"))

            main_first = first(info["pid"])
            check(main_first != float("inf"), "the main thread has no GIL events")
            for name in ("spinner-0", "spinner-1"):
                tid = info["threads"][name]
                check(first(tid) != float("inf"), "%s has no events" % name)
                check(main_first < first(tid), "main thread first seen at %s, %s at %s" % (
                    main_first, name, first(tid)))

    def sigint_leaves_a_complete_file(self, python):
        with Workload(python, ["contention", "--threads", "2"]) as w, tempfile.TemporaryDirectory() as d:
            child = subprocess.Popen([self.gilsample, "--pid", str(w.pid), "-o", d], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
            try:
                # Printed once sampling has begun: the readiness signal.
                first = child.stderr.readline()
                check("recording process" in first, "unexpected first line: %r" % first)
                child.send_signal(signal.SIGINT)
                _, rest = child.communicate(timeout=STEP_TIMEOUT)
            finally:
                if child.poll() is None:
                    child.kill()
                    child.wait()
            check(child.returncode == 0, "gilsample exited %d after SIGINT: %s" % (child.returncode, rest.strip()))
            trace = Trace.single(d)
            check(trace.other["end_reason"] == "Stopped", "end_reason %s" % trace.other["end_reason"])
            check(any(e.get("name") == "thread_name" for e in trace.value["traceEvents"]), "no thread names")

    def every_layout_source_records(self, python, sources):
        with Workload(python, ["contention", "--threads", "2"]) as w:
            for source in sources:
                with tempfile.TemporaryDirectory() as d:
                    self.run_gilsample(["--pid", str(w.pid), "--duration", "1", "--layout-source", source], d)
                    trace = Trace.single(d)
                    used = trace.other["layout_source"]
                    check(used.startswith(source), "asked for %s, the trace says %s" % (source, used))
                    for name in ("spinner-0", "spinner-1"):
                        tid = w.threads[name]
                        check(trace.total(tid, "hold_gil") > 0, "%s: %s never held the GIL" % (source, name))
                        check(trace.total(tid, "take_gil") > 0, "%s: %s never waited" % (source, name))

    def info_describes_the_target(self, python):
        with Workload(python, ["contention", "--threads", "2"]) as w:
            text = self.info(w.pid)
            self.save(python, "info-contention.txt", text)
            version = python.label.split("-")[-1]
            check(re.search(r"^python: +%s\.\d+ \(\w+, aarch64\)" % re.escape(version), text, re.M),
                  "info does not name an aarch64 Python %s:\n%s" % (version, text))
            shared = "pie" in python.label
            check(re.search(r"^binary: .*\((shared libpython|executable)\)$", text, re.M).group(1) ==
                  ("shared libpython" if shared else "executable"), "info names the wrong binary:\n%s" % text)
            bias = int(re.search(r"\(load bias (0x[0-9a-f]+)\)", text).group(1), 16)
            # Debian's python3.11 and python3.13 are non-PIE executables; the shared libpython is loaded
            # wherever the kernel puts it.
            check((bias != 0) == shared, "load bias %#x for %s" % (bias, python.label))
            threads = re.findall(r"^  tid +(\d+) ", text, re.M)
            check(sorted(int(t) for t in threads) == sorted(w.threads.values()),
                  "info's threads %s, the target's %s" % (threads, sorted(w.threads.values())))

    def waiter_counts_see_threads_behind_a_hog(self, python):
        libc = subprocess.run(python.command + ["-c", "import os; print(os.confstr('CS_GNU_LIBC_VERSION'))"],
                              stdout=subprocess.PIPE, text=True, timeout=STEP_TIMEOUT).stdout.strip()
        check(libc.startswith("glibc 2."), "confstr says %r" % libc)
        want = ("counted by %s (now 3 in take_gil's wait, 0 in drop_gil's)" % libc, "free")
        with Workload(python, ["hog", "--threads", "3"]) as w:
            seen = []
            for _ in range(POLL_LIMIT):
                text = self.info(w.pid)
                got = (line(text, "GIL waiters:"), line(text, "GIL mutex:").split(";")[0])
                if got == want:
                    self.save(python, "info-hog.txt", text)
                    waiters = [str(t) for n, t in w.threads.items() if n.startswith("waiter-")]
                    self.capture_threads(python, "hog", w, lambda lines: all(
                        lines[t].startswith("98 ") for t in waiters))
                    return
                seen.append(got)
            raise CheckFailed("never saw %s; saw %s" % (want, seen[-3:]))

    def gil_mutex_owner_is_named(self, python):
        with Workload(python, ["squatter"], stdin=subprocess.PIPE) as w:
            before = line(self.info(w.pid), "GIL mutex:")
            address = before.rsplit("at ", 1)[-1]
            check(re.fullmatch(r"0x[0-9a-f]+", address), "no mutex address in %r" % before)
            w.child.stdin.write(address + "\n")
            w.child.stdin.flush()
            want = "held by thread %d (as the target numbers it)" % w.threads["squatter"]
            seen = []
            for _ in range(POLL_LIMIT):
                text = self.info(w.pid)
                now = line(text, "GIL mutex:")
                if now.startswith(want):
                    self.save(python, "info-squatter.txt", text)
                    self.capture_threads(python, "squatter", w)
                    return
                seen.append(now)
            raise CheckFailed("never saw %r; saw %s" % (want, seen[-3:]))

    def wheel_installs_and_records(self, wheel):
        # A venv as users make one; Debian's pip (this root has no ensurepip) installs into it.
        venv = tempfile.mkdtemp()
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=STEP_TIMEOUT)
        python = os.path.join(venv, "bin", "python")
        done = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--no-index", wheel],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=STEP_TIMEOUT)
        check(done.returncode == 0, "pip install --no-index failed: %s" % done.stdout.strip()[-2000:])
        script = (
            "import json, sys, tempfile, gilsample\n"
            "d = tempfile.mkdtemp()\n"
            "with gilsample.start(output_dir=d, duration=None) as r:\n"
            "    sum(range(3000000))\n"
            "print(json.dumps({'binary': gilsample.binary_path(), 'files': r.files}))\n")
        done = subprocess.run([python, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd="/", timeout=STEP_TIMEOUT)
        check(done.returncode == 0, "import gilsample and record failed: %s" % done.stderr.strip()[-2000:])
        result = json.loads(done.stdout.strip().splitlines()[-1])
        check(result["binary"] == os.path.join(venv, "bin", "gilsample"), "the binary %s is not the wheel's" % (
            result["binary"]))
        check(len(result["files"]) == 1, "files: %s" % result["files"])
        trace = Trace(result["files"][0])
        check(any(e["name"] == "hold_gil" for e in trace.events), "the recording has no hold_gil")
        shutil.rmtree(venv)

    # --- what the host keeps as fixtures ---

    def save(self, python, name, text):
        path = os.path.join(self.capture, python.label, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def capture_threads(self, python, scenario, w, settled=lambda lines: True):
        """The GIL's bytes (read by root through /proc/PID/mem) between two readings of every thread's
        /proc syscall line that agree and satisfy `settled`: a moment no thread moved through."""
        text = self.info(w.pid)
        gil = int(line(text, "GIL:"), 16)
        tasks = sorted(os.listdir("/proc/%d/task" % w.pid))

        def syscall_lines():
            lines = {}
            for task in tasks:
                with open("/proc/%d/task/%s/syscall" % (w.pid, task)) as f:
                    lines[task] = f.read().strip()
            return lines

        with open("/proc/%d/mem" % w.pid, "rb", buffering=0) as mem:
            for _ in range(POLL_LIMIT):
                before = syscall_lines()
                mem.seek(gil)
                raw = mem.read(256)
                after = syscall_lines()
                if before == after and settled(after):
                    break
            else:
                raise CheckFailed("%s: the threads never held still for a capture" % scenario)
        self.save(python, "%s.json" % scenario, json.dumps({
            "python": line(text, "python:"), "gil_address": "%#x" % gil, "gil_bytes": raw.hex(),
            "threads": w.threads, "syscall": after, "info": text.splitlines()}, indent=1) + "\n")


def line(text, prefix):
    for each in text.splitlines():
        if each.startswith(prefix):
            return each[len(prefix):].strip()
    raise CheckFailed("info prints no %r line:\n%s" % (prefix, text))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gilsample", required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--capture", required=True)
    parser.add_argument("--subset", choices=["smoke", "full"], default="full")
    parser.add_argument("--sid", action="store_true", help="also check sid's 3.13 under /sid")
    parser.add_argument("--wheel", default=None)
    args = parser.parse_args()
    checks = Checks(args)
    pythons = [(Python("bookworm-3.11", ["/usr/bin/python3.11"], args.workload), ["dwarf", "file"]),
               (Python("bookworm-pie-3.11", ["/usr/local/bin/python3.11-pie"], args.workload), ["file"])]
    if args.sid:
        shutil.copy(args.workload, "/sid/tmp/gil_workload.py")
        pythons.append((Python("sid-3.13", ["chroot", "/sid", "/usr/bin/python3.13"], "/tmp/gil_workload.py"),
                        ["debug-offsets", "dwarf", "file"]))
    if args.subset == "smoke":
        pythons = pythons[:1]
    for python, sources in pythons:
        checks.run("%s contention" % python.label, checks.contention, python)
        if args.subset == "smoke":
            continue
        checks.run("%s lone sleeper" % python.label, checks.lone_sleeper_never_waits, python)
        checks.run("%s GIL-free calls" % python.label, checks.gil_free_calls_are_released, python)
        checks.run("%s launch" % python.label, checks.launch_records_from_the_start, python)
        checks.run("%s SIGINT" % python.label, checks.sigint_leaves_a_complete_file, python)
        checks.run("%s layout sources" % python.label, checks.every_layout_source_records, python, sources)
        checks.run("%s info" % python.label, checks.info_describes_the_target, python)
        checks.run("%s waiter counts" % python.label, checks.waiter_counts_see_threads_behind_a_hog, python)
        checks.run("%s mutex owner" % python.label, checks.gil_mutex_owner_is_named, python)
    if args.subset == "full" and args.wheel is None:
        print("@@ skipped: no aarch64 wheel", flush=True)
    elif args.subset == "full":
        checks.run("wheel %s" % os.path.basename(args.wheel), checks.wheel_installs_and_records, args.wheel)
    print("@@ %d passed, %d failed" % (checks.passed, checks.failed), flush=True)
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
