"""The reference tool's API (`gil_trace_record.py` of the sysTrace GIL Tracer), on gilsample."""

import threading

from ._recording import Recording

_current = []
_lock = threading.Lock()


def gil_trace_record_start(pid_list=None, duration=-1):
    """Starts recording `pid_list` (None: every Python process using an NPU) for `duration` seconds,
    or a string with a unit ("10s", "500ms", "2m"); -1: until gil_trace_record_stop(). Returns once
    sampling has begun."""
    recording = Recording(pids=pid_list, all_npu=pid_list is None, duration=duration)
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
