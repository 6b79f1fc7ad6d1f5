"""Exceptions raised for the gilsample binary's errors, one class per documented exit status."""


class GilsampleError(RuntimeError):
    """The binary refused or failed. `message` is its own message; `exit_code` its exit status."""

    def __init__(self, message, exit_code=1):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class UsageError(GilsampleError, ValueError):
    """A bad argument (exit status 2)."""


class PermissionDenied(GilsampleError, PermissionError):
    """Not allowed to read the target (exit status 3): needs root, CAP_SYS_PTRACE, or ptrace_scope."""


class NotSupported(GilsampleError):
    """The target is not a Python gilsample can read (exit status 4)."""


class ProcessNotFound(GilsampleError, ProcessLookupError):
    """No such process, or nothing found to record (exit status 5)."""


class OutputError(GilsampleError, OSError):
    """The trace could not be written (exit status 6); the message says where partial data is."""


_BY_EXIT_CODE = {
    2: UsageError,
    3: PermissionDenied,
    4: NotSupported,
    5: ProcessNotFound,
    6: OutputError,
}


def error_for(message, exit_code):
    """The exception for a message and exit status from the binary."""
    return _BY_EXIT_CODE.get(exit_code, GilsampleError)(message, exit_code)
