"""The Python package, installed from its wheel: the reference tool's names and command line, how
the binary is found (by absolute path, never through PATH), and the ptracer handshake. Run by
scripts/test-python.sh under every pyenv interpreter."""

import os
import shutil
import subprocess
import sys
import unittest

import gilsample

from api_helpers import REPO, Spinners, TempDirTest, load, tids_holding


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
