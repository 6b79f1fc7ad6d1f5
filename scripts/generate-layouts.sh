#!/usr/bin/env bash
# Regenerates python-layouts/ from the DWARF of real CPython builds, with gilsample's own DWARF reader
# (`gilsample layout --from ELF`). Layout files are never typed by hand.
#
# Sources: every pyenv build with a shared libpython under $(pyenv root)/versions/ (3.7 and newer).
# Usage: scripts/generate-layouts.sh [OUT_DIR]   (default: python-layouts/)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-python-layouts}
mkdir -p "$out"
cargo build --quiet --release
bin=target/release/gilsample
root=${PYENV_ROOT:-$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")}
for dir in "$root"/versions/3.*; do
    version=$(basename "$dir")
    case "$version" in 3.[0-6].*) continue ;; esac
    lib=$(ls "$dir"/lib/libpython3*.so.1.0 2>/dev/null | head -n 1 || true)
    if [ -z "$lib" ]; then
        echo "skip $version: no shared libpython" >&2
        continue
    fi
    "$bin" layout --from "$lib" --python-version "$version" --out "$out"
done
