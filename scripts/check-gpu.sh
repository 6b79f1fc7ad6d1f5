#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and CUDA PyTorch (not part of the test suite: CI has no GPU):
# a training loop fed by Python loader threads (fixtures/workloads/gpu_training.py) is found by
# `--all-gpu` and recorded; the check fails unless the trace is that process's, names its threads,
# and carries stacks that name the loaders' and the training step's code. Prints the summary and
# `gilsample report`; leaves them, and the trace gzipped, in OUTPUT_DIR.
#
# Usage: scripts/check-gpu.sh [GILSAMPLE_BINARY] [OUTPUT_DIR]   (PYTHON: the interpreter with torch)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-target/release/gilsample}")
out=${2:-$(mktemp -d)}
python=${PYTHON:-python3}
mkdir -p "$out"
nvidia-smi -L || echo "(no nvidia-smi)"
"$python" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'

# Start the job and wait until it says READY (the GPU has run a step, every loader has queued).
ready_pipe=$(mktemp -u)
mkfifo "$ready_pipe"
"$python" fixtures/workloads/gpu_training.py --loaders 3 --seconds 120 > "$ready_pipe" 2> "$out/workload.err" &
job=$!
trap 'kill $job 2>/dev/null || true; rm -f "$ready_pipe"' EXIT
exec 3< "$ready_pipe"
ready=""
while read -r -t 180 line <&3; do
    case $line in READY*) ready=${line#READY }; break ;; esac
done
[ -n "$ready" ] || { cat "$out/workload.err"; echo "the GPU job never became ready" >&2; exit 1; }
echo "job ready: $ready"

# Found by --all-gpu, not by its pid.
"$bin" record --all-gpu --duration 3 -o "$out/traces" -v > "$out/summary.txt" 2>&1 || {
    cat "$out/summary.txt"; echo "gilsample record failed" >&2; exit 1; }
cat "$out/summary.txt"
"$bin" report "$out/traces" > "$out/report.txt" 2>&1
cat "$out/report.txt"

READY="$ready" "$python" - "$out/traces" <<'PY'
import glob, json, os, sys
ready = json.loads(os.environ["READY"])
traces = glob.glob(os.path.join(sys.argv[1], "GIL_*_rank_*.json"))
mine = [t for t in traces if os.path.basename(t).startswith("GIL_%d_" % ready["pid"])]
assert mine, "--all-gpu did not record the job (pid %d); traces: %s" % (ready["pid"], traces)
trace = json.load(open(mine[0]))
events = trace["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
for name, tid in ready["threads"].items():
    assert names.get(tid) == name, "thread %d is named %r in the trace, %r in the job" % (tid, names.get(tid), name)
stacks = [(e["name"], e["tid"], e["args"]["stack"]) for e in events
          if e.get("ph") == "X" and "stack" in e.get("args", {})]
def slices_in(threads, functions, slice_name=None):
    """Slices of threads named `threads...` (and named `slice_name`, when given) whose stacks have a
    frame naming one of `functions`."""
    return sum(1 for n, tid, stack in stacks
               if (slice_name is None or n == slice_name) and names.get(tid, "").startswith(threads)
               and any(function in f for f in stack for function in functions))
loader_holds = slices_in("loader-", ["build_batch"], "hold_gil")
trainer_stacks = slices_in("MainThread", ["train_step", "main ("])
other = trace["otherData"]
print("threads named:", sorted(names.values()))
print("slices with stacks: %d; loader holds in build_batch: %d; main thread's in train_step/main: %d"
      % (len(stacks), loader_holds, trainer_stacks))
print("rate %.0f Hz of %.0f, stacks read %d, reused %d, sampler %s" % (
    other["rate_achieved_hz"], other["rate_requested_hz"], other["stacks_read"],
    other["stacks_reused_same_innermost_frame"], other["sampler_scheduling"]))
assert loader_holds > 0, "no loader hold has a stack in build_batch"
assert trainer_stacks > 0, "no main-thread slice has a stack in the training loop"
print("check-gpu: OK")
PY
for t in "$out"/traces/*.json; do gzip -c "$t" > "$out/$(basename "$t").gz"; done
