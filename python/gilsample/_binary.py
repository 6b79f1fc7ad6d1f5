"""Where the gilsample binary is: the one installed by this package's wheel, found by absolute path.

Never through PATH: a wrapper that runs its collector through the inherited PATH as root can be made to
run anything (the reference tool's wrapper was flagged for exactly that).
"""

import os

from ._errors import GilsampleError


def _installed_by_wheel():
    """The binary recorded in this distribution's RECORD (pip puts it in the environment's bin/)."""
    package_dir = os.path.dirname(os.path.abspath(__file__))
    site_dir = os.path.dirname(package_dir)
    try:
        entries = os.listdir(site_dir)
    except OSError:
        return None
    for entry in sorted(entries):
        if not (entry.startswith("gilsample-") and entry.endswith(".dist-info")):
            continue
        try:
            with open(os.path.join(site_dir, entry, "RECORD")) as record:
                lines = record.read().splitlines()
        except OSError:
            continue
        for line in lines:
            path = line.split(",", 1)[0]
            if os.path.basename(path) != "gilsample":
                continue
            # `pip install --target DIR` puts scripts in DIR/bin, where RECORD's path (made for
            # site-packages) does not lead: that first, else where RECORD says (the environment's
            # bin/, beside site-packages).
            for candidate in (os.path.join(site_dir, "bin", "gilsample"),
                              os.path.normpath(os.path.join(site_dir, path))):
                if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                    return candidate
    return None


def binary_path(binary=None):
    """The absolute path of the binary to run: `binary` when given (must be absolute), else the
    wheel's."""
    if binary is not None:
        binary = os.fspath(binary)
        if not os.path.isabs(binary):
            raise GilsampleError(
                "binary={!r}: give an absolute path (gilsample never searches PATH)".format(binary), 2
            )
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            raise GilsampleError("binary={!r}: not an executable file".format(binary), 2)
        return binary
    found = _installed_by_wheel()
    if found is None:
        raise GilsampleError(
            "the gilsample binary that this package's wheel installs was not found (this package was "
            "not installed from the wheel, or its files were moved); install the wheel with "
            "`pip install --force-reinstall gilsample-<version>-<platform>.whl`, or give the binary's "
            "path: binary='/absolute/path/to/gilsample' to start(), Recording() or "
            "gil_trace_record_start()"
        )
    return found
