#!/usr/bin/env python3
"""Regenerates python-layouts/opcodes/back-jumps.json from real CPython builds: the opcode numbers gilsample
needs to give a loop's back-edge jump its line where the line table leaves it without one (3.10, 3.11
and 3.12, whose compilers emit those jumps with no line; docs/new-python-version.md).

Each interpreter given (a path, or sid-3.X for the sid root's) is run and asked for its own opcode
map (`dis._all_opmap`, which holds the specialised and instrumented forms too; 3.10's `dis.opmap`).
Opcode numbers are the same on every architecture of one version. Never typed by hand;
tests/layouts.rs checks the file against every 3.10, 3.11 and 3.12 interpreter present.

Usage: scripts/generate-opcodes.py [--print] [PYTHON ...]   (default: every pyenv 3.10, 3.11 and 3.12 build)
  --print: write the table to stdout instead (what tests/layouts.rs compares)
"""
import glob
import json
import os
import subprocess
import sys

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python-layouts", "opcodes", "back-jumps.json")
# The jumps that go back to a loop's head, in every form the interpreter may leave in its bytecode:
# by their argument from the next instruction (3.11+), or to the instruction it numbers (3.10's
# JUMP_ABSOLUTE, gone in 3.11); and the prefix that widens their argument.
BACK_JUMPS = ["JUMP_BACKWARD", "JUMP_BACKWARD_QUICK", "JUMP_BACKWARD_NO_INTERRUPT", "INSTRUMENTED_JUMP_BACKWARD"]
ABSOLUTE_JUMPS = ["JUMP_ABSOLUTE"]
EXTENDED_ARGS = ["EXTENDED_ARG", "EXTENDED_ARG_QUICK"]
VERSIONS = ("3.10", "3.11", "3.12")
# 3.10 has no specialised forms, and no `_all_opmap`: its `opmap` is all of them.
ASK = ("import dis, json, platform; m = getattr(dis, '_all_opmap', dis.opmap); "
       "print(json.dumps([platform.python_version(), {n: m[n] for n in %r if n in m}]))"
       % (BACK_JUMPS + ABSOLUTE_JUMPS + EXTENDED_ARGS,))


def command(python):
    if python.startswith("sid-"):
        root = os.environ.get("GILSAMPLE_SID_ROOT", "/var/tmp/gilsample-sid")
        return ["chroot", root, "/usr/bin/python" + python[len("sid-"):]]
    return [python]


def opcodes_of(python):
    version, opmap = json.loads(subprocess.check_output(command(python) + ["-c", ASK], text=True))
    return version, {
        "generated_from_version": version,
        "back_jumps": sorted(opmap[n] for n in BACK_JUMPS if n in opmap),
        "absolute_jumps": sorted(opmap[n] for n in ABSOLUTE_JUMPS if n in opmap),
        "extended_args": sorted(opmap[n] for n in EXTENDED_ARGS if n in opmap),
    }


def main():
    args = sys.argv[1:]
    to_stdout = "--print" in args
    pythons = [a for a in args if a != "--print"]
    if not pythons:
        root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
        pythons = sorted(p for v in VERSIONS for p in glob.glob(os.path.join(root, "versions", v + ".*", "bin", "python" + v)))
    table = {}
    for python in pythons:
        version, entry = opcodes_of(python)
        key = ".".join(version.split(".")[:2])
        if key in VERSIONS:
            table[key] = entry
    if set(table) != set(VERSIONS):
        sys.exit("need a 3.10, a 3.11 and a 3.12 interpreter; found %s" % sorted(table))
    text = json.dumps(table, indent=2, sort_keys=True) + "\n"
    if to_stdout:
        sys.stdout.write(text)
        return
    with open(OUT, "w") as f:
        f.write(text)
    print("wrote %s from %s" % (os.path.normpath(OUT), ", ".join(pythons)))


if __name__ == "__main__":
    main()
