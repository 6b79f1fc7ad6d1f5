"""What the Python package's tests share: spinning threads to record, reading a trace, a test case
with its own directory. Not a test module itself (unittest discovers test*.py)."""

import ctypes
import json
import os
import shutil
import tempfile
import threading
import unittest

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


def alive(pid):
    """Whether `pid` runs (a zombie does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
