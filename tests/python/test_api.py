"""The Python package, installed from its wheel: start/stop with the readiness handshake, the context
manager, the reference tool's names and command line, where files land, errors as exceptions, and
running the binary by absolute path. Run by scripts/test-python.sh under every pyenv interpreter."""

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import warnings

import gilsample

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Linux pids stop at 2**22; this one cannot exist.
NO_SUCH_PID = 2 ** 22 + 1


def native_tid():
    if hasattr(threading, "get_native_id"):
        return threading.get_native_id()
    return ctypes.CDLL(None).syscall(186)  # gettid on x86_64, for 3.7


class Spinners(object):
    """Threads running pure Python until the block ends: the GIL changes hands all the time."""

    def __init__(self, count=2):
        self.count = count
        self.tids = []
        self._stop = threading.Event()
        self._started = threading.Barrier(count + 1)
        # Turns: how often the GIL passed from one spinner to another (each found running Python
        # where another ran last), so a test can wait for holds that a sampler saw whole.
        self._turns = 0
        self._last = None
        self._turned = threading.Condition()

    def _spin(self):
        me = native_tid()
        self.tids.append(me)
        self._started.wait()
        n = 0
        while not self._stop.is_set():
            n += 1
            if self._last != me:
                self._last = me
                with self._turned:
                    self._turns += 1
                    self._turned.notify_all()

    def wait_turns(self, count=3):
        """Blocks, without the GIL, until it has passed between spinners `count` more times: each
        turn but the last is a spinner's whole hold (a switch interval), which a recording started
        before this call samples, however soon it is stopped after."""
        with self._turned:
            target = self._turns + count
            self._turned.wait_for(lambda: self._turns >= target)

    def __enter__(self):
        self._threads = [threading.Thread(target=self._spin) for _ in range(self.count)]
        for t in self._threads:
            t.start()
        self._started.wait()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for t in self._threads:
            t.join()


def load(path):
    with open(path) as f:
        return json.load(f)


def tids_holding(trace):
    return {e["tid"] for e in trace["traceEvents"] if e.get("name") == "hold_gil"}


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir, True)


class StartStop(TempDirTest):
    def test_start_returns_once_sampling_has_begun_and_stop_returns_complete_files(self):
        with Spinners(2) as spinners:
            recording = gilsample.start(output_dir=self.dir)
            returned_ns = time.monotonic_ns()
            self.assertTrue(recording.started, "a started event arrived before start() returned")
            spinners.wait_turns()
            files = recording.stop()
        self.assertEqual(files, [os.path.join(self.dir, "GIL_%d_rank_0.json" % os.getpid())])
        trace = load(files[0])
        # The first sample was taken before start() returned: a profiler started next is covered.
        self.assertLessEqual(trace["otherData"]["recording_start_monotonic_ns"], returned_ns)
        self.assertTrue(set(spinners.tids) & tids_holding(trace), "the spinners were seen holding")
        self.assertEqual(recording.exit_code, 0)
        # The API's own threads are in the trace under names that say whose they are.
        names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
        self.assertIn("gilsample-control", names)

    def test_context_manager_stops_at_the_end_of_the_block(self):
        with Spinners(2):
            with gilsample.start(output_dir=self.dir, rate="5khz") as recording:
                self.assertTrue(recording.running())
        self.assertFalse(recording.running())
        self.assertEqual(len(recording.files), 1)
        self.assertEqual(load(recording.files[0])["otherData"]["rate_requested_hz"], 5000.0)

    def test_the_summary_is_the_reports_answer_as_data(self):
        with Spinners(2) as spinners:
            recording = gilsample.start(output_dir=self.dir, duration=0.5)
            recording.wait()
        processes = recording.summary["processes"]
        self.assertEqual([p["pid"] for p in processes], [os.getpid()])
        threads = {t["tid"]: t for t in processes[0]["threads"]}
        for tid in spinners.tids:
            self.assertGreater(threads[tid]["hold_s"], 0.0, "spinner %d held" % tid)
        waited_for = [h["tid"] for t in threads.values() for h in t["waited_for"]]
        self.assertTrue(set(spinners.tids) & set(waited_for), "waits are blamed on the spinners")

    def test_module_stop_stops_what_start_started(self):
        with Spinners(1):
            gilsample.start(output_dir=self.dir)
            files = gilsample.stop()
        self.assertEqual(len(files), 1)
        self.assertTrue(os.path.isfile(files[0]))

    def test_a_recording_with_a_duration_ends_by_itself(self):
        recording = gilsample.start(output_dir=self.dir, duration=0.3)
        files = recording.wait(timeout=120)
        self.assertEqual(recording.exit_code, 0)
        self.assertEqual(load(files[0])["otherData"]["end_reason"], "Duration")

    def test_a_duration_takes_a_unit_as_on_the_command_line(self):
        # "300" without the unit would be 300 s, and wait() would run out of time first.
        recording = gilsample.start(output_dir=self.dir, duration="300ms")
        files = recording.wait(timeout=120)
        self.assertEqual(recording.exit_code, 0)
        self.assertEqual(load(files[0])["otherData"]["end_reason"], "Duration")

    def test_a_duration_in_an_unknown_unit_raises_usage_error_naming_the_forms(self):
        with self.assertRaises(gilsample.UsageError) as caught:
            gilsample.start(output_dir=self.dir, duration="10 fortnights")
        self.assertIn("10s, 500ms, 2m", str(caught.exception))

    def test_files_land_where_the_command_line_would_put_them(self):
        env_dir = os.path.join(self.dir, "from_env")
        old_env = os.environ.get("GILSAMPLE_DIR")
        old_cwd = os.getcwd()
        try:
            os.environ["GILSAMPLE_DIR"] = env_dir
            with gilsample.start() as recording:
                pass
            self.assertEqual(os.path.dirname(recording.files[0]), env_dir)
            del os.environ["GILSAMPLE_DIR"]
            os.chdir(self.dir)
            with gilsample.start() as recording:
                pass
            self.assertEqual(os.path.realpath(os.path.dirname(recording.files[0])),
                             os.path.realpath(os.path.join(self.dir, "gil_traces")))
        finally:
            os.chdir(old_cwd)
            if old_env is None:
                os.environ.pop("GILSAMPLE_DIR", None)
            else:
                os.environ["GILSAMPLE_DIR"] = old_env

    def test_a_program_that_exits_without_stop_still_gets_a_complete_file(self):
        script = ("import gilsample, sys\n"
                  "r = gilsample.start(output_dir=sys.argv[1])\n"
                  "print(r.started[0]['path'])\n")
        out = subprocess.run([sys.executable, "-c", script, self.dir], stdout=subprocess.PIPE,
                             check=True, timeout=120)
        path = out.stdout.decode().strip()
        trace = load(path)  # complete JSON: the exit waited for the recording to finish
        self.assertIn(trace["otherData"]["end_reason"], ("Stopped", "TargetExited"))


class Documented(unittest.TestCase):
    def test_start_has_the_signature_the_docs_show(self):
        import inspect
        import re
        with open(os.path.join(REPO, "docs", "python-api.md")) as f:
            readme = f.read()
        shown = re.search(r"`(start\(pids=.*?\))`", readme, re.S).group(1)
        normalise = lambda text: " ".join(text.replace('"', "'").split())
        actual = "start" + str(inspect.signature(gilsample.start))
        self.assertEqual(normalise(shown), normalise(actual))


class Errors(TempDirTest):
    def test_a_missing_process_raises_process_not_found(self):
        with self.assertRaises(gilsample.ProcessNotFound) as caught:
            gilsample.start(pids=[NO_SUCH_PID], output_dir=self.dir)
        self.assertEqual(caught.exception.exit_code, 5)
        self.assertIn(str(NO_SUCH_PID), str(caught.exception))
        self.assertIsInstance(caught.exception, ProcessLookupError)

    def test_every_pid_refused_raises_the_first_ones_error_with_each_reason(self):
        with self.assertRaises(gilsample.ProcessNotFound) as caught:
            gilsample.start(pids=[NO_SUCH_PID, NO_SUCH_PID + 1], output_dir=self.dir)
        message = str(caught.exception)
        self.assertIn("none of the 2 processes given could be recorded: ", message)
        for pid in (NO_SUCH_PID, NO_SUCH_PID + 1):
            self.assertIn("process %d: process %d does not exist" % (pid, pid), message)
        self.assertNotIn("above", message)  # the lines "above" are the binary's stderr, unseen here

    def test_a_bad_rate_raises_usage_error_with_the_binarys_message(self):
        with self.assertRaises(gilsample.UsageError) as caught:
            gilsample.start(rate="fast", output_dir=self.dir)
        self.assertEqual(caught.exception.exit_code, 2)
        self.assertIn("fast", str(caught.exception))

    def test_a_process_that_is_not_python_raises_not_supported(self):
        sleeper = subprocess.Popen(["sleep", "600"])
        self.addCleanup(sleeper.wait)
        self.addCleanup(sleeper.kill)
        with self.assertRaises(gilsample.NotSupported) as caught:
            gilsample.start(pids=[sleeper.pid], output_dir=self.dir)
        self.assertEqual(caught.exception.exit_code, 4)
        self.assertIn(str(sleeper.pid), str(caught.exception))
        # The binary's advice, as this API takes it.
        self.assertIn("pass extra_args=['--subprocesses'] to start()", str(caught.exception))
        self.assertNotIn("add --subprocesses", str(caught.exception))

    def test_an_output_dir_that_is_a_file_is_said_in_this_apis_words(self):
        path = os.path.join(self.dir, "a-file")
        open(path, "w").close()
        with Spinners(1):
            with self.assertRaises(gilsample.OutputError) as caught:
                gilsample.start(output_dir=path)
        said = str(caught.exception)
        self.assertIn("it is a file, but a directory is needed: output_dir names the directory", said)
        self.assertNotIn("-o ", said)


# A program that records itself, forks a child that ends with a normal interpreter exit (its atexit
# hooks run) after trying every way to stop what it inherited and recording itself under the
# reference's names; the parent then goes on and stops. Prints what each saw, as JSON.
FORKING_PROGRAM = r"""
import json, os, sys, time, warnings
import gilsample
out = sys.argv[1]
recording = gilsample.start(output_dir=out)
os.environ["GILSAMPLE_DIR"] = os.path.join(out, "reference")
gilsample.gil_trace_record_start(pid_list=[os.getpid()], duration=-1)
read_end, write_end = os.pipe()
child = os.fork()
if child == 0:
    os.close(read_end)
    seen = {"module_stop": gilsample.stop(), "reference_stop": gilsample.gil_trace_record_stop()}
    try:
        recording.stop()
        seen["inherited_stop"] = "returned"
    except gilsample.GilsampleError as e:
        seen["inherited_stop"] = str(e)
    os.environ["GILSAMPLE_DIR"] = out
    gilsample.gil_trace_record_start(pid_list=[os.getpid()], duration=-1)
    seen["own_files"] = gilsample.gil_trace_record_stop()
    os.write(write_end, json.dumps(seen).encode())
    os.close(write_end)
    sys.exit(0)
os.close(write_end)
with os.fdopen(read_end) as pipe:
    seen = json.loads(pipe.read())
os.waitpid(child, 0)
seen["child"] = child
seen["after_child_ns"] = time.monotonic_ns()
seen["parent_files"] = recording.stop() + gilsample.gil_trace_record_stop()
print(json.dumps(seen))
"""


class Fork(TempDirTest):
    def test_a_forked_child_neither_ends_nor_inherits_the_parents_recording(self):
        out = subprocess.run([sys.executable, "-c", FORKING_PROGRAM, self.dir], stdout=subprocess.PIPE,
                             check=True, timeout=300)
        seen = json.loads(out.stdout.decode())
        # The child's module-level stops had nothing of its own to stop; the inherited recording
        # refuses, naming whose it is.
        self.assertEqual(seen["module_stop"], [])
        self.assertEqual(seen["reference_stop"], [])
        self.assertIn("only the process that started a recording", seen["inherited_stop"])
        self.assertEqual(seen["own_files"],
                         [os.path.join(self.dir, "GIL_%d_rank_0.json" % seen["child"])])
        self.assertEqual(len(seen["parent_files"]), 2, seen)
        for parent_file in seen["parent_files"]:
            trace = load(parent_file)
            # Ended by the parent's stops, after the child's exit: not cut short by it.
            self.assertEqual(trace["otherData"]["end_reason"], "Stopped")
            self.assertGreater(trace["otherData"]["recording_end_monotonic_ns"],
                               seen["after_child_ns"])


# A program that records another process, forks a child that outlives it, and dies without a word
# (os._exit: no atexit hook, no stop). Prints the recorder's pid and the child's.
ORPHANING_PROGRAM = r"""
import os, sys
import gilsample
recording = gilsample.start(pids=[int(sys.argv[3])], output_dir=sys.argv[1])
child = os.fork()
if child == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the test reads stdout to its end
    os.read(int(sys.argv[2]), 1)  # until the test lets it go
    os._exit(0)
print(recording.helper_pid, child, flush=True)
os._exit(0)
"""


def alive(pid):
    """Whether `pid` runs (a zombie does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


class ForkedChildOutlivingTheParent(TempDirTest):
    def test_the_recording_ends_with_the_parent_not_with_its_last_child(self):
        # The process recorded outlives the program too: only the control socket's end can stop it.
        target = subprocess.Popen([sys.executable, "-c", "import sys; print(1, flush=True); "
                                   "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.addCleanup(target.wait)
        self.addCleanup(target.stdin.close)
        target.stdout.readline()  # running Python
        let_go, held = os.pipe()
        self.addCleanup(os.close, held)  # the child then reads end-of-file and exits
        out = subprocess.run([sys.executable, "-c", ORPHANING_PROGRAM, self.dir, str(let_go),
                              str(target.pid)],
                             stdout=subprocess.PIPE, pass_fds=[let_go], check=True, timeout=300)
        os.close(let_go)
        helper, child = (int(word) for word in out.stdout.split())
        # Looked at for up to a minute: the recorder sees its socket's end as the parent's and
        # finishes, while the child (holding no copy of it) and the process recorded still run.
        for _ in range(600):
            if not alive(helper):
                break
            time.sleep(0.1)
        self.assertFalse(alive(helper), "the recorder waited for the forked child to exit")
        self.assertTrue(alive(child) and alive(target.pid))


class SecondRecording(TempDirTest):
    def test_a_second_recording_into_the_same_place_is_refused_at_start_and_says_how(self):
        first = gilsample.start(output_dir=self.dir)
        try:
            with self.assertRaises(gilsample.OutputError) as caught:
                gilsample.start(output_dir=self.dir)
            self.assertIn("already running", str(caught.exception))
            self.assertIn("another output_dir", str(caught.exception))
            # Another place is fine, at the same time.
            other = os.path.join(self.dir, "window2")
            self.assertEqual(len(gilsample.start(output_dir=other).stop()), 1)
        finally:
            files = first.stop()
        # After the first one's stop, its file is there: refused in Python's words, or replaced.
        with self.assertRaises(gilsample.OutputError) as caught:
            gilsample.start(output_dir=self.dir)
        self.assertIn("force=True", str(caught.exception))
        self.assertNotIn("--force", str(caught.exception))
        replaced = gilsample.start(output_dir=self.dir, force=True).stop()
        self.assertEqual(replaced, files)
        # One that ended by its duration, never waited for, is over: not "already running".
        ended = gilsample.start(output_dir=self.dir, duration="100ms", force=True)
        for _ in range(600):
            if not ended.running():
                break
            time.sleep(0.1)
        self.assertEqual(gilsample.start(output_dir=self.dir, force=True).stop(), files)
        self.assertEqual(ended.wait(), files)

    def test_a_search_that_found_nothing_names_this_apis_other_ways(self):
        with self.assertRaises(gilsample.ProcessNotFound) as caught:
            gilsample.start(all_gpu=True, output_dir=self.dir)
        said = str(caught.exception)
        self.assertIn("NVIDIA GPU", said)
        self.assertIn("all_npu=True", said)
        self.assertIn("a duration", said)
        self.assertNotIn("all_gpu=True", said)
        self.assertNotIn("--", said)

    def test_a_ctrl_c_inside_start_leaves_no_recorder_running(self):
        # A stand-in binary that says where it is and never becomes ready; once it has said so, a
        # SIGINT reaches the program while start() waits for it.
        said = os.path.join(self.dir, "pid")
        fake = os.path.join(self.dir, "fake-gilsample")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho $$ > %s.tmp && mv %s.tmp %s\nexec sleep 600\n" % (said, said, said))
        os.chmod(fake, 0o755)

        def interrupt_once_it_runs():
            while not os.path.exists(said):
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt_once_it_runs, daemon=True).start()
        with self.assertRaises(KeyboardInterrupt):
            gilsample.start(output_dir=self.dir, binary=fake, ready_timeout=600)
        with open(said) as f:
            recorder = int(f.read())
        # Killed and reaped by start() before the KeyboardInterrupt went on: no such process now.
        self.assertFalse(os.path.exists("/proc/%d" % recorder), "the recorder was left running")
        self.assertEqual(gilsample.stop(), [])

    def test_files_are_absolute_paths_whatever_the_directory_later(self):
        old_cwd = os.getcwd()
        try:
            os.chdir(self.dir)
            recording = gilsample.start(output_dir="relative")
            os.chdir(old_cwd)
            files = recording.stop()
        finally:
            os.chdir(old_cwd)
        self.assertTrue(os.path.isabs(files[0]) and os.path.isfile(files[0]), files)
        self.assertEqual(os.path.realpath(os.path.dirname(files[0])),
                         os.path.realpath(os.path.join(self.dir, "relative")))

    def test_a_process_asked_for_but_not_recorded_is_said_as_a_warning(self):
        sleeper = subprocess.Popen(["sleep", "600"])
        self.addCleanup(sleeper.wait)
        self.addCleanup(sleeper.kill)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            recording = gilsample.start(pids=[os.getpid(), sleeper.pid], output_dir=self.dir)
            files = recording.stop()
        self.assertEqual(len(files), 1)
        texts = [str(w.message) for w in said if issubclass(w.category, RuntimeWarning)]
        self.assertTrue(any(str(sleeper.pid) in t and "no complete trace" in t for t in texts), texts)


class Ptracer(TempDirTest):
    def test_the_program_allows_its_recorder_to_read_it_where_yama_asks(self):
        # Yama (kernel.yama.ptrace_scope = 1) lets a process be read only by its ancestors or by the
        # process it names with prctl(PR_SET_PTRACER); the recorder is a child, so the program must
        # name it, before the recorder attaches. strace shows the call and its argument.
        strace = shutil.which("strace")
        self.assertIsNotNone(strace, "strace is needed for this test (apt-get install strace)")
        log = os.path.join(self.dir, "strace.log")
        script = ("import gilsample, sys\n"
                  "r = gilsample.start(output_dir=sys.argv[1])\n"
                  "print(r.helper_pid)\n"
                  "r.stop()\n")
        out = subprocess.run([strace, "-f", "-qq", "-e", "trace=prctl", "-o", log, sys.executable, "-c",
                              script, self.dir], stdout=subprocess.PIPE, check=True, timeout=300)
        helper = int(out.stdout.decode().split()[0])
        with open(log) as f:
            calls = f.read()
        self.assertRegex(calls, r"prctl\((PR_SET_PTRACER|0x59616d61)[^,]*, %d\b" % helper)


class BinaryPath(TempDirTest):
    def test_the_wheels_binary_is_used_by_absolute_path_never_through_path(self):
        binary = gilsample.binary_path()
        self.assertTrue(os.path.isabs(binary))
        self.assertTrue(binary.startswith(os.path.realpath(sys.prefix)) or binary.startswith(sys.prefix))
        marker = os.path.join(self.dir, "hijacked")
        fake = os.path.join(self.dir, "gilsample")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\ntouch %s\nexit 1\n" % marker)
        os.chmod(fake, 0o755)
        old_path = os.environ["PATH"]
        os.environ["PATH"] = self.dir + os.pathsep + old_path
        try:
            with Spinners(1):
                with gilsample.start(output_dir=self.dir) as recording:
                    pass
        finally:
            os.environ["PATH"] = old_path
        self.assertFalse(os.path.exists(marker), "the gilsample found through PATH was run")
        self.assertEqual(len(recording.files), 1)

    def test_a_binary_installed_with_pip_target_is_found_in_its_bin(self):
        # `pip install --target DIR` puts the binary in DIR/bin, where RECORD's path (made for
        # site-packages) does not lead.
        package = os.path.dirname(os.path.abspath(gilsample.__file__))
        site = os.path.join(self.dir, "site")
        shutil.copytree(package, os.path.join(site, "gilsample"))
        info = [e for e in os.listdir(os.path.dirname(package))
                if e.startswith("gilsample-") and e.endswith(".dist-info")]
        shutil.copytree(os.path.join(os.path.dirname(package), info[0]), os.path.join(site, info[0]))
        os.mkdir(os.path.join(site, "bin"))
        shutil.copy2(gilsample.binary_path(), os.path.join(site, "bin", "gilsample"))
        out = subprocess.run([sys.executable, "-c", "import gilsample; print(gilsample.binary_path())"],
                             env=dict(os.environ, PYTHONPATH=site), cwd=self.dir,
                             stdout=subprocess.PIPE, check=True)
        self.assertEqual(out.stdout.decode().strip(), os.path.join(site, "bin", "gilsample"))

    def test_without_the_wheels_binary_the_error_names_every_call_that_takes_one(self):
        # The package alone (a checkout's python/ on PYTHONPATH): no dist-info, no binary beside it.
        package = os.path.dirname(os.path.abspath(gilsample.__file__))
        site = os.path.join(self.dir, "bare")
        shutil.copytree(package, os.path.join(site, "gilsample"))
        code = ("import gilsample\n"
                "try:\n"
                "    gilsample.gil_trace_record_start(pid_list=[1])\n"
                "except gilsample.GilsampleError as e:\n"
                "    print(e)\n")
        out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=site),
                             cwd=self.dir, stdout=subprocess.PIPE, check=True)
        said = out.stdout.decode()
        self.assertIn("binary='/absolute/path/to/gilsample' to start(), Recording() or "
                      "gil_trace_record_start()", said)
        self.assertNotIn("reinstall its wheel", said)

    def test_a_relative_binary_is_refused(self):
        with self.assertRaises(gilsample.GilsampleError) as caught:
            gilsample.start(binary="gilsample")
        self.assertIn("absolute", str(caught.exception))


class ReferenceNames(TempDirTest):
    def setUp(self):
        super(ReferenceNames, self).setUp()
        self.old_env = os.environ.get("GILSAMPLE_DIR")
        os.environ["GILSAMPLE_DIR"] = self.dir

    def tearDown(self):
        if self.old_env is None:
            os.environ.pop("GILSAMPLE_DIR", None)
        else:
            os.environ["GILSAMPLE_DIR"] = self.old_env

    def test_gil_trace_record_start_and_stop(self):
        with Spinners(2) as spinners:
            gilsample.gil_trace_record_start(pid_list=[os.getpid()], duration=-1)
            spinners.wait_turns()
            files = gilsample.gil_trace_record_stop()
        self.assertEqual(files, [os.path.join(self.dir, "GIL_%d_rank_0.json" % os.getpid())])
        self.assertTrue(set(spinners.tids) & tids_holding(load(files[0])))

    def test_gil_trace_record_start_takes_the_binary_where_no_wheel_brought_one(self):
        with Spinners(2):
            gilsample.gil_trace_record_start(pid_list=[os.getpid()], duration=-1,
                                             binary=gilsample.binary_path())
            files = gilsample.gil_trace_record_stop()
        self.assertEqual(files, [os.path.join(self.dir, "GIL_%d_rank_0.json" % os.getpid())])
        with self.assertRaises(gilsample.GilsampleError) as caught:
            gilsample.gil_trace_record_start(pid_list=[os.getpid()], binary="gilsample")
        self.assertIn("absolute", str(caught.exception))

    def test_pid_list_takes_one_pid_or_a_comma_separated_string_as_the_reference_does(self):
        for given in (os.getpid(), str(os.getpid()), "%d," % os.getpid()):
            with Spinners(2):
                gilsample.gil_trace_record_start(pid_list=given, duration=-1)
                files = gilsample.gil_trace_record_stop()
            self.assertEqual(files, [os.path.join(self.dir, "GIL_%d_rank_0.json" % os.getpid())])
            os.remove(files[0])
        for bad in ("12a", [], [True], 1.5, "-3"):
            with self.assertRaises(gilsample.UsageError) as caught:
                gilsample.gil_trace_record_start(pid_list=bad, duration=-1)
            self.assertIn("process ids %r" % (bad,), str(caught.exception))

    def test_gil_trace_record_start_takes_a_duration_with_a_unit(self):
        recording = gilsample.gil_trace_record_start(pid_list=[os.getpid()], duration="300ms")
        files = recording.wait(timeout=120)
        self.assertEqual(load(files[0])["otherData"]["end_reason"], "Duration")
        self.assertEqual(gilsample.gil_trace_record_stop(), files)

    def test_no_pid_list_means_every_npu_process_as_in_the_reference(self):
        # This machine has no NPU: the reference's default finds nothing, and says so.
        with self.assertRaises(gilsample.ProcessNotFound) as caught:
            gilsample.gil_trace_record_start()
        self.assertIn("Ascend NPU", str(caught.exception))
        # The way out in this API's words, without the command line's list of commands.
        self.assertIn("pid_list=[os.getpid()]", str(caught.exception))
        self.assertNotIn("--pid", str(caught.exception))
        self.assertNotIn("most common commands", str(caught.exception))

    def test_the_reference_default_that_finds_no_npu_says_so_at_start_and_at_exit(self):
        # With a duration the search goes on as processes start; on this machine none comes, and a
        # program that never calls stop must still hear that nothing was written.
        script = ("import warnings, gilsample\n"
                  "warnings.simplefilter('always')\n"
                  "gilsample.gil_trace_record_start(duration='300ms')\n")
        out = subprocess.run([sys.executable, "-c", script], stderr=subprocess.PIPE, timeout=300)
        said = out.stderr.decode()
        self.assertIn("RuntimeWarning: gilsample: no Python process using the accelerator", said)
        self.assertIn("wrote no trace", said)
        self.assertIn("Ascend NPU", said)

    def test_the_command_line_drop_in(self):
        child = subprocess.Popen(
            [sys.executable, "-c", "import sys\nprint('ready', flush=True)\nwhile True: pass"],
            stdout=subprocess.PIPE)
        self.addCleanup(child.stdout.close)
        self.addCleanup(child.wait)
        self.addCleanup(child.kill)
        self.assertEqual(child.stdout.readline().strip(), b"ready")
        script = os.path.join(REPO, "scripts", "gil_trace_record.py")
        subprocess.run([sys.executable, script, "--pid", str(child.pid), "--duration", "0.3"],
                       check=True, timeout=120, stderr=subprocess.DEVNULL)
        trace = load(os.path.join(self.dir, "GIL_%d_rank_0.json" % child.pid))
        self.assertIn(child.pid, tids_holding(trace))

    def test_the_drop_in_script_without_the_package_says_how_to_get_it(self):
        # -I -S: no site-packages, so no gilsample, as in a Python it was not installed into.
        script = os.path.join(REPO, "scripts", "gil_trace_record.py")
        run = subprocess.run([sys.executable, "-I", "-S", script, "--help"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 1, run.stderr)
        self.assertIn("needs the gilsample package", run.stderr)
        self.assertNotIn("Traceback", run.stderr)

    def test_the_drop_in_module_exports_the_reference_names(self):
        sys.path.insert(0, os.path.join(REPO, "scripts"))
        try:
            import gil_trace_record
        finally:
            sys.path.pop(0)
        self.assertIs(gil_trace_record.gil_trace_record_start, gilsample.gil_trace_record_start)
        self.assertIs(gil_trace_record.gil_trace_record_stop, gilsample.gil_trace_record_stop)


if __name__ == "__main__":
    unittest.main()
