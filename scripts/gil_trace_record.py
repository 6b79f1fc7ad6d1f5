#!/usr/bin/env python3
"""Drop-in for the reference tool's gil_trace_record.py (sysTrace GIL Tracer), on gilsample.

Command line, as before:

    python gil_trace_record.py [--pid 123,456] [--duration 10]

--pid: comma-separated PIDs (default: every Python process running on an NPU); --duration: seconds,
or with a unit (10s, 500ms, 2m) (default -1: until Ctrl+C or SIGTERM). Files are GIL_<pid>_rank_<rank>.json in $GILSAMPLE_DIR, else
./gil_traces.

Python API, as before:

    from gil_trace_record import gil_trace_record_start, gil_trace_record_stop

Needs the gilsample package (`pip install gilsample-<version>-<platform>.whl`, from
scripts/build-wheels.sh); its binary is run by absolute path.
"""

import argparse
import os
import sys

try:
    from gilsample import binary_path, gil_trace_record_start, gil_trace_record_stop
except ImportError as missing:
    NEEDS = ("gil_trace_record needs the gilsample package in this Python: "
             "pip install gilsample-<version>-<platform>.whl (built by scripts/build-wheels.sh)")
    if __name__ == "__main__":
        sys.exit("error: " + NEEDS)
    raise ImportError(NEEDS) from missing

__all__ = ["gil_trace_record_start", "gil_trace_record_stop"]


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Record when each Python thread waits for, holds and drops the GIL (gilsample)."
    )
    parser.add_argument("--pid", help="comma-separated PIDs; default: every Python process on an NPU")
    parser.add_argument("--duration", default="-1",
                        help="how long to record: seconds (10) or with a unit (10s, 500ms, 2m); "
                             "-1 (default) records until Ctrl+C or SIGTERM")
    args = parser.parse_args(argv)
    command = [binary_path()]
    command += ["--pid", args.pid] if args.pid else ["--all-npu"]
    # Passed on as written: the binary checks it and says which forms it accepts.
    command += ["--duration", args.duration]
    # The binary takes over this process: Ctrl+C and SIGTERM reach it directly and end the recording
    # cleanly, and its exit status is this command's.
    os.execv(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
