#!/usr/bin/env bash
# Records the golden sample streams of tests/replay.rs into fixtures/samples/<case>/: each benchmark
# workload (scripts/bench_accuracy.py's) for a few seconds at 10 kHz on a pyenv interpreter, saved with
# --save-samples, with a README saying how it was made. Then writes the expected files from them:
#   GILSAMPLE_BLESS=1 cargo test --test replay golden
# Rerecord only when the stream format changes or a new case is wanted: the point of the cases is that
# the same samples are replayed by every later version of the rules.
#
# Usage (as root, after cargo build --release): scripts/record-golden-samples.sh [SECONDS [CASE...]]
# (only the named cases, e.g. a new one, when CASEs are given)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-2}"
only=("${@:2}")
binary=target/release/gilsample
[[ -x "$binary" ]] || { echo "build first: cargo build --release" >&2; exit 1; }
root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
workload=fixtures/workloads/gil_workload.py

# case  version  workload arguments (as scripts/bench_accuracy.py runs them)
cases=(
  "contention-3.12 3.12 contention --threads 4"
  "mixed-3.11 3.11 released --threads 2"
  "dispatch-3.12 3.12 dispatch --threads 4"
  "dispatch-3.11 3.11 dispatch --threads 4"
  "fastswitch-3.13 3.13 contention --threads 4 --switch-interval 0.0005"
  "many-3.12 3.12 many --threads 2 --nappers 32"
  "json-3.12 3.12 json --threads 2"
  "pyloop-3.12 3.12 pyloop --threads 2"
)
for spec in "${cases[@]}"; do
  read -r name version args <<<"$spec"
  if ((${#only[@]})) && [[ ! " ${only[*]} " == *" $name "* ]]; then
    continue
  fi
  python="$(ls -d "$root"/versions/"$version".*/bin/python3 | sort -V | tail -1)"
  dir="fixtures/samples/$name"
  mkdir -p "$dir"
  rm -f "$dir"/samples.gilsamples "$dir"/expected-* "$dir"/actual-*
  # The workload says READY on stdout once its threads run; it runs a little longer than the recording.
  exec 3< <("$python" "$workload" $args --seconds $((seconds + 3)))
  read -r ready <&3
  pid="$(sed 's/^READY //' <<<"$ready" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')"
  trace="$(mktemp -d)"
  "$binary" --pid "$pid" --rate 10khz --duration "$seconds" --quiet \
    --save-samples "$dir/samples.gilsamples" -o "$trace/trace.json"
  cat "$trace/trace.json" >/dev/null && rm -rf "$trace"
  cat >/dev/null <&3 || true
  exec 3<&-
  cat >"$dir/README.md" <<README
# Golden sample stream: $name

Recorded by scripts/record-golden-samples.sh on $(date -u +%Y-%m-%d):

    $(basename "$python") (Python $("$python" -c 'import platform; print(platform.python_version())')) fixtures/workloads/gil_workload.py $args
    gilsample $("$binary" --version | awk '{print $2}') --pid PID --rate 10khz --duration $seconds --save-samples samples.gilsamples

on Linux kernel $(uname -r) ($(uname -m)), $(nproc) CPUs. \`expected-slices.jsonl\` (every
take_gil/hold_gil/drop_gil slice as [tid, name, ts, dur]) and \`expected-summary.txt\` are what
\`gilsample replay --verbose\` gives with the current rules; \`GILSAMPLE_BLESS=1 cargo test --test replay
golden\` rewrites them after an intended rule change.
README
  echo "$name: $(stat -c %s "$dir/samples.gilsamples") bytes"
done
