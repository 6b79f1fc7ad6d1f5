"""Record per-thread GIL wait/hold/release timelines from inside a Python program.

    import gilsample

    with gilsample.start(output_dir="gil_traces") as recording:   # returns once sampling has begun
        train_one_epoch()                                         # start the framework profiler here too
    print(recording.files)                                        # ['/abs/gil_traces/GIL_<pid>_rank_<rank>.json']

or, with the reference tool's names:

    from gilsample import gil_trace_record_start, gil_trace_record_stop
    gil_trace_record_start(pid_list=[os.getpid()], duration=-1)
    ...
    gil_trace_record_stop()

The recording is done by the gilsample binary installed with this package, run by absolute path (never
looked up through PATH). It reads this process's memory from outside; the process is never stopped.
"""

from ._binary import binary_path
from ._errors import (
    GilsampleError,
    NotSupported,
    OutputError,
    PermissionDenied,
    ProcessNotFound,
    UsageError,
)
from ._recording import Recording, start, stop
from ._reference import gil_trace_record_start, gil_trace_record_stop

__all__ = [
    "GilsampleError",
    "NotSupported",
    "OutputError",
    "PermissionDenied",
    "ProcessNotFound",
    "Recording",
    "UsageError",
    "binary_path",
    "gil_trace_record_start",
    "gil_trace_record_stop",
    "start",
    "stop",
]
