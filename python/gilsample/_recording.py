"""Start and stop a recording: the binary runs beside this process and reports over a socket pair.

The handshake: the binary waits for a byte before it attaches (so this process can first allow it to
read its memory where Yama restricts ptrace), then says `ready` once every target has been sampled.
`start()` returns after `ready`, so a profiler started next covers the same window. Sending a byte, or
this process exiting, stops the recording; `stop()` returns once the files are complete.
"""

import atexit
import ctypes
import json
import operator
import os
import socket
import subprocess
import sys
import threading
import warnings

from ._binary import binary_path
from ._errors import GilsampleError, UsageError, error_for

# prctl(PR_SET_PTRACER, pid): lets `pid` read this process where kernel.yama.ptrace_scope is 1.
_PR_SET_PTRACER = 0x59616D61

_active = []
_active_lock = threading.Lock()


def _forget_the_parents_recordings():
    """In a forked child: the recordings are the parent's, and ending them (at the child's exit, or
    by its stop()) would cut the parent's short. The child's copies of their sockets and pipes are
    closed too: the recorder takes its socket's end-of-file as the stop when the parent dies
    without a word (os._exit, a crash), which a child holding a copy would hold back. The lock may
    have been held by a parent thread."""
    global _active_lock
    _active_lock = threading.Lock()
    for recording in _active:
        recording._close_in_child()
    del _active[:]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_the_parents_recordings)


def _output_place(output_dir):
    """Where the binary puts the files, as it decides it: `output_dir`, else $GILSAMPLE_DIR (set
    but empty is unset), else ./gil_traces; absolute, for comparing two recordings' places."""
    place = output_dir if output_dir is not None else os.environ.get("GILSAMPLE_DIR") or "gil_traces"
    return os.path.abspath(os.fspath(place))


# The binary's ways out of "nothing found", as this API's arguments say them.
_OPTIONS_IN_PYTHON = [
    ("--all-gpu", "all_gpu=True"),
    ("--all-npu", "all_npu=True"),
    ("--duration", "a duration, to wait for one"),
]


def _for_python(message):
    """The binary's message, with its command-line advice said as this API takes it."""
    message = message.replace("(use --force to overwrite)",
                              "(start(..., force=True) replaces it; or give each recording its own "
                              "output_dir, or $GILSAMPLE_DIR for gil_trace_record_start)")
    # This API writes into a directory only, and takes the binary's options as extra_args.
    message = message.replace(" (for one process's trace in one file, give -o a name ending in .json)",
                              ": output_dir names the directory the traces go into")
    message = message.replace("add --subprocesses to record",
                              "pass extra_args=['--subprocesses'] to start() to record")
    cli_advice = message.find("give --pid PID[,PID...]")
    if cli_advice >= 0:
        advice = message[cli_advice:]
        ways = ["pid_list=[os.getpid()] to gil_trace_record_start() or pids=[...] to "
                "gilsample.start()"]
        ways += [python for option, python in _OPTIONS_IN_PYTHON if option in advice]
        message = message[:cli_advice] + "give " + ", or ".join(ways)
    return message


def _allow_reader(pid):
    """Lets the binary read this process under Yama. Without Yama the call fails harmlessly."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PTRACER, ctypes.c_ulong(pid), ctypes.c_ulong(0), ctypes.c_ulong(0),
                   ctypes.c_ulong(0))
    except (OSError, AttributeError):
        pass


def _rate_text(rate):
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        return repr(rate)
    return str(rate)


def _duration_text(duration):
    """The --duration argument: a number is seconds; a string keeps its unit ("10s", "500ms", "2m");
    -1 means until stopped. The binary checks it and says what it accepts."""
    if isinstance(duration, (int, float)) and not isinstance(duration, bool):
        return repr(duration)
    return str(duration)


def _pid_list(pids):
    """`pids` as a list of ints: one pid (an int, or "123"), a comma- or space-separated string
    ("123,456", as the reference tool's --pid takes), or an iterable of ints or digit strings. Anything
    else is a UsageError naming what was given, never a digit-by-digit list of pids."""
    given = pids
    if isinstance(pids, str):
        pids = pids.replace(",", " ").split()
    elif isinstance(pids, int) and not isinstance(pids, bool):
        pids = [pids]
    try:
        items = list(pids)
    except TypeError:
        items = None
    parsed = []
    for item in items or []:
        if isinstance(item, bool):
            break
        if isinstance(item, str):
            if not (item.strip().isascii() and item.strip().isdigit()):
                break
            parsed.append(int(item))
            continue
        try:
            # Any integer type (numpy's too), never a float.
            parsed.append(operator.index(item))
        except TypeError:
            break
    if items is None or not items or len(parsed) != len(items) or min(parsed) <= 0:
        raise UsageError(
            "process ids {!r}: give them as a list of numbers ([os.getpid()]), one number, or a "
            "comma-separated string (\"123,456\")".format(given), 2)
    return parsed


class Recording(object):
    """One run of the gilsample binary. Use `start()` to make one."""

    def __init__(self, pids=None, duration=None, rate="10khz", output_dir=None, all_npu=False,
                 all_gpu=False, merge=False, binary=None, ready_timeout=120.0, extra_args=(),
                 force=False):
        if pids is not None and (all_npu or all_gpu):
            raise GilsampleError("give pids, or all_npu/all_gpu, not both", 2)
        if pids is None and not (all_npu or all_gpu):
            pids = [os.getpid()]
        self.pids = None if pids is None else _pid_list(pids)
        # A forked child inherits this object: only the process that started it may end it.
        self._owner = os.getpid()
        # The binary's paths are relative to where it started: this directory.
        self._cwd = os.getcwd()
        self._place = _output_place(output_dir)
        self._refuse_a_second_recording_into_the_same_files()
        self.files = []
        self.merged = None
        # What `gilsample report --json` says of each recorded process, once finished.
        self.summary = None
        self.started = []
        self.skipped = []
        self.failed = []
        self.exit_code = None
        self._binary = binary_path(binary)
        self._finished = None
        self._error = None
        self._stderr = []
        self._failures_said = False
        args = [self._binary]
        if self.pids is not None:
            args += ["--pid", ",".join(str(p) for p in self.pids)]
        elif all_gpu:
            args.append("--all-gpu")
        else:
            args.append("--all-npu")
        args += ["--rate", _rate_text(rate)]
        if duration is not None:
            args += ["--duration", _duration_text(duration)]
        if output_dir is not None:
            args += ["--output", os.fspath(output_dir)]
        if merge:
            args.append("--merge")
        if force:
            args.append("--force")
        args += [str(a) for a in extra_args]

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        args += ["--control-fd", str(theirs.fileno())]
        try:
            # Its own session: a Ctrl+C meant for this program does not cut the recording short;
            # stop() or this program's exit ends it.
            self._process = subprocess.Popen(
                args, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as e:
            ours.close()
            raise GilsampleError("could not run {}: {}".format(self._binary, e))
        finally:
            theirs.close()
        self._socket = ours
        try:
            self._handshake(ready_timeout)
        except BaseException:
            # A Ctrl+C (KeyboardInterrupt) before start() returned: no one could stop it later.
            self._abandon()
            raise
        if not self._got_ready:
            if self._ready.is_set():
                self._end(timeout=30)
                raise self._failure("gilsample exited before sampling began")
            self._end(timeout=0)
            raise GilsampleError("gilsample did not start sampling within {} s".format(ready_timeout))
        with _active_lock:
            _active.append(self)
        self._say_what_is_not_recorded()

    def _handshake(self, ready_timeout):
        """Starts the readers, lets the binary read this process, says go, and waits for `ready`."""
        self._ready = threading.Event()
        self._got_ready = False
        self._stderr_reader = threading.Thread(target=self._read_stderr, name="gilsample-stderr",
                                               daemon=True)
        self._stderr_reader.start()
        # Also when recording every NPU/GPU process: this program may be one of them.
        _allow_reader(self._process.pid)
        self._control_reader = threading.Thread(target=self._read_control, name="gilsample-control",
                                                daemon=True)
        self._control_reader.start()
        try:
            self._socket.sendall(b"g")
        except OSError:
            pass  # it already exited; its error arrives below
        self._ready.wait(ready_timeout)

    def _abandon(self):
        """Ends a recorder that start() will not return: killed and reaped, whatever had started."""
        try:
            self._process.kill()
        except OSError:
            pass
        self._process.wait()
        self._socket.close()
        self.exit_code = self._process.returncode

    def _close_in_child(self):
        """In a forked child: lets go of this (the parent's) recording's socket and pipe. Their fds
        are pointed at /dev/null rather than closed: objects of the parent's threads, gone in the
        child, still hold them, and would close whatever later took those numbers."""
        null = os.open(os.devnull, os.O_RDWR)
        try:
            for stream in (self._socket, self._process.stderr):
                try:
                    fd = stream.fileno()
                except (OSError, ValueError):
                    continue
                if fd >= 0:
                    os.dup2(null, fd)
        finally:
            os.close(null)

    def _refuse_a_second_recording_into_the_same_files(self):
        """Two recordings of one process into one place would both write its file: the second
        would fail at the end, and the first recording's file would be the one kept."""
        with _active_lock:
            running = [r for r in _active if r._place == self._place and r.running()]
        for other in running:
            if other.pids is None or self.pids is None or set(other.pids) & set(self.pids):
                raise error_for(
                    "a recording into {} is already running (started by an earlier start() in this "
                    "program); stop() it first, or give this one another output_dir".format(
                        self._place), 6)

    def _say_what_is_not_recorded(self):
        """Processes asked for but not recorded, and a search for accelerator users that found none
        yet, are said as warnings: start() returned, and nothing else would show them."""
        for event in self.skipped:
            warnings.warn("gilsample: process {} is not recorded: {}".format(
                event.get("pid"), event.get("why")), RuntimeWarning, stacklevel=4)
        if self.pids is None and not self.started:
            warnings.warn("gilsample: no Python process using the accelerator was found yet; it is "
                          "looked for as processes start, until the duration ends",
                          RuntimeWarning, stacklevel=4)

    def _read_stderr(self):
        for line in iter(self._process.stderr.readline, b""):
            self._stderr.append(line.decode("utf-8", "replace"))
        self._process.stderr.close()

    def _read_control(self):
        stream = self._socket.makefile("rb")
        try:
            self._read_events(stream)
        except OSError:
            pass  # the binary exited without reading what was sent: its exit status tells why
        finally:
            stream.close()
            self._ready.set()

    def _read_events(self, stream):
        for raw in stream:
            try:
                event = json.loads(raw.decode("utf-8"))
            except ValueError:
                continue
            kind = event.get("event")
            if kind == "started":
                self.started.append(event)
            elif kind == "skipped":
                self.skipped.append(event)
            elif kind == "failed":
                self.failed.append(event)
            elif kind == "error":
                self._error = event
            elif kind == "finished":
                self._finished = event
            if kind == "ready":
                self._got_ready = True
            if kind in ("ready", "error", "finished"):
                self._ready.set()

    @property
    def helper_pid(self):
        """The pid of the gilsample process doing the recording."""
        return self._process.pid

    @property
    def output(self):
        """What the binary printed (its summary), so far."""
        return "".join(self._stderr)

    def _failure(self, fallback):
        if self._error is not None:
            message, code = self._error.get("message", fallback), self._error.get("exit_code", 1)
        else:
            # Refused before the channel was open (a bad argument): its message is on stderr.
            lines = self.output.strip().splitlines()
            errors = [line.split("error:", 1)[1].strip() for line in lines if "error:" in line]
            message = errors[0] if errors else (lines[-1] if lines else fallback)
            code = self.exit_code or 1
        # Every pid refused: the binary said why each as it happened, which came here as events,
        # and its error says so (`none_recordable`): the reasons are worded here.
        refused = (self._error or {}).get("none_recordable")
        if refused and self.skipped:
            message = "none of the {} processes given could be recorded: {}".format(
                refused.get("given", len(self.skipped)),
                "; ".join("process {}: {}".format(e.get("pid"), e.get("why")) for e in self.skipped))
        return error_for(_for_python(message), code)

    def _end(self, timeout):
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._control_reader.join()
        self._stderr_reader.join()
        self._socket.close()
        self.exit_code = self._process.returncode
        with _active_lock:
            if self in _active:
                _active.remove(self)

    def running(self):
        """True until the binary has exited."""
        return self._process.poll() is None

    def stop(self, timeout=120.0):
        """Stops recording (a no-op if it already ended), waits for the files, returns their paths."""
        self._check_owner("stop")
        if self.exit_code is None:
            try:
                self._socket.sendall(b"s")
            except OSError:
                pass
            self._end(timeout)
        return self._result()

    def wait(self, timeout=None):
        """Waits for a recording with a duration to end by itself; returns the files' paths."""
        self._check_owner("wait for")
        if self.exit_code is None:
            self._end(timeout)
        return self._result()

    def _check_owner(self, what):
        if os.getpid() != self._owner:
            raise GilsampleError(
                "this recording was started by process {}, and this is process {} (a child forked "
                "from it): only the process that started a recording can {} it. A child records "
                "itself with a start() of its own".format(self._owner, os.getpid(), what))

    def _result(self):
        if self._finished is not None:
            here = lambda path: os.path.join(self._cwd, path)  # noqa: E731
            self.files = [here(path) for path in self._finished.get("files", [])]
            self.summary = self._finished.get("summary")
            merged = self._finished.get("merged")
            self.merged = here(merged) if merged else merged
        if not self.files:
            raise self._failure("gilsample exited with status {}".format(self.exit_code))
        said, self._failures_said = self._failures_said, True
        for event in [] if said else self.failed:
            warnings.warn("gilsample: process {} has no complete trace: {}".format(
                event.get("pid"), _for_python(event.get("message", ""))), RuntimeWarning, stacklevel=3)
        return list(self.files)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        # In a forked child leaving the block, the recording is the parent's to end.
        if os.getpid() == self._owner:
            self.stop()
        return False

    def __repr__(self):
        state = "running" if self.exit_code is None else "exit {}".format(self.exit_code)
        return "<gilsample.Recording pids={} {} files={}>".format(self.pids, state, self.files)


def start(pids=None, duration=None, rate="10khz", output_dir=None, *, all_npu=False, all_gpu=False,
          merge=False, binary=None, ready_timeout=120.0, extra_args=(), force=False):
    """Starts recording and returns once sampling has begun.

    pids: process ids ([123, 456], 123, or "123,456"); None means this process (pass all_npu=True or all_gpu=True for every Python
    process using an NPU or GPU). duration: seconds (10, 0.5) or a string with a unit ("10s",
    "500ms", "2m", "1h"); None or -1 until stop(). rate: "10khz", "500hz" or Hz.
    output_dir: where GIL_<pid>_rank_<rank>.json files go; None means $GILSAMPLE_DIR, else
    ./gil_traces, as on the command line. merge: also GIL_merged.json. binary: the absolute path of
    another gilsample binary. ready_timeout: seconds to wait for the first sample. extra_args: more
    command-line arguments for the binary. force: replace trace files already there (refused
    otherwise, so that a second recording into one place does not replace the first's file).

    Returns a Recording (also a context manager). Errors from the binary raise GilsampleError
    subclasses carrying its message and exit status; processes asked for but not recorded are said
    as RuntimeWarnings. The files' paths are absolute. A forked child does not inherit the parent's
    recordings: it neither stops them nor is stopped with them.
    """
    return Recording(pids=pids, duration=duration, rate=rate, output_dir=output_dir,
                     all_npu=all_npu, all_gpu=all_gpu, merge=merge, binary=binary,
                     ready_timeout=ready_timeout, extra_args=extra_args, force=force)


def stop():
    """Stops every recording started in this process; returns the paths of the files written."""
    with _active_lock:
        recordings = list(_active)
    files = []
    for recording in recordings:
        files += recording.stop()
    return files


@atexit.register
def _finish_at_exit():
    # Leaving the program ends its recordings; waiting here means their files are complete.
    with _active_lock:
        recordings = list(_active)
    for recording in recordings:
        try:
            recording.stop()
        except GilsampleError as e:
            # Nothing else would say it: the program is ending.
            sys.stderr.write("gilsample: the recording started by this program wrote no trace: "
                             "{}\n".format(e))
