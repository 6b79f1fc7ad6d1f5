#!/usr/bin/env bash
# Runs a command while one busy loop per core keeps every CPU busy, as on a shared, loaded machine:
# the live tests must pass there too (they synchronise on readiness, never on time being enough).
# Usage: scripts/with-cpu-hog.sh COMMAND [ARGS...]
set -euo pipefail
hogs=()
stop_hogs() {
    for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait "${hogs[@]}" 2>/dev/null || true
}
trap stop_hogs EXIT
for _ in $(seq "$(nproc)"); do
    bash -c 'while :; do :; done' &
    hogs+=($!)
done
echo "with-cpu-hog: ${#hogs[@]} busy loops on $(nproc) CPUs" >&2
"$@"
