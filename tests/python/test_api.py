"""The Python package, installed from its wheel: start/stop with the readiness handshake, the context
manager, where files land, errors as exceptions, forks and second recordings (the reference tool's
names and how the binary is found: test_api_names.py). Run by scripts/test-python.sh under every
pyenv interpreter."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest
import warnings

import gilsample

from api_helpers import NO_SUCH_PID, REPO, Spinners, TempDirTest, alive, load, tids_holding


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

    def test_a_stopped_recordings_last_sample_comes_after_the_stop_was_asked(self):
        # An idle program is sampled at the quiet rate, so a stop often lands during a tick. Each
        # recording must still cover the moment stop() was called: tried 30 times, as a stop that
        # ended on the tick it interrupted did so about once in ten.
        for attempt in range(30):
            place = os.path.join(self.dir, str(attempt))
            recording = gilsample.start(output_dir=place)
            asked_ns = time.monotonic_ns()
            trace = load(recording.stop()[0])
            self.assertEqual(trace["otherData"]["end_reason"], "Stopped")
            self.assertGreater(trace["otherData"]["recording_end_monotonic_ns"], asked_ns,
                               "attempt %d" % attempt)

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
            # Ended by the parent's stops, after the child's exit: not cut short by it (a stopped
            # recording's last sample comes after the stop was asked).
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
        # Waiting for one is offered only where this machine has a GPU to open.
        gpus_here = any(re.fullmatch(r"nvidia[0-9]+", name) for name in os.listdir("/dev"))
        self.assertEqual("a duration" in said, gpus_here, said)
        self.assertEqual("/dev has no such device" in said, not gpus_here, said)
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
