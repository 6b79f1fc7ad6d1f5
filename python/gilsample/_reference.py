"""The reference tool's API (`gil_trace_record.py` of the sysTrace GIL Tracer), on gilsample."""

import os
import threading

from ._recording import Recording

_current = []
_lock = threading.Lock()


def _forget_the_parents_recordings():
    """In a forked child, gil_trace_record_stop() ends only what the child started."""
    global _lock
    _lock = threading.Lock()
    del _current[:]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_the_parents_recordings)


def gil_trace_record_start(pid_list=None, duration=-1, binary=None):
    """Starts recording `pid_list` (None: every Python process using an NPU) for `duration` seconds,
    or a string with a unit ("10s", "500ms", "2m"); -1: until gil_trace_record_stop(). Returns once
    sampling has begun. `binary`: the gilsample binary's absolute path, where this package did not
    come with it (a checkout, `cargo install`); the reference's calls leave it out."""
    recording = Recording(pids=pid_list, all_npu=pid_list is None, duration=duration, binary=binary)
    with _lock:
        _current.append(recording)
    return recording


def gil_trace_record_stop():
    """Stops what gil_trace_record_start() started; returns the paths of the files written."""
    with _lock:
        recordings = list(_current)
        del _current[:]
    files = []
    for recording in recordings:
        files += recording.stop()
    return files
