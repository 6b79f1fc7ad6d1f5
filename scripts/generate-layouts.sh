#!/usr/bin/env bash
# Regenerates python-layouts/ from the DWARF of real CPython builds, with gilsample's own DWARF reader
# (`gilsample layout --from ELF`). Layout files are never typed by hand.
#
# Sources:
#   - every pyenv build with a shared libpython under $(pyenv root)/versions/ (3.7 and newer);
#   - the Debian sid root made by scripts/make-sid-root.sh ($GILSAMPLE_SID_ROOT, default
#     /var/tmp/gilsample-sid): python3.X with the detached DWARF of python3.X-dbg (found by build-id),
#     and the python3.Xd debug builds. Where both give the same key, the Debian build wins only for
#     versions pyenv does not have;
#   - Debian's arm64 builds unpacked by scripts/fetch-arm64-builds.sh ($GILSAMPLE_ARM64_ROOT, default
#     /var/tmp/gilsample-arm64), for the aarch64 layouts (the version comes from their Py_Version).
# Usage: scripts/generate-layouts.sh [OUT_DIR]   (default: python-layouts/)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-python-layouts}
mkdir -p "$out"
cargo build --quiet --release
bin=target/release/gilsample
root=${PYENV_ROOT:-$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")}
declare -A have
for dir in "$root"/versions/3.*; do
    version=$(basename "$dir")
    case "$version" in 3.[0-6].*) continue ;; esac
    lib=$(ls "$dir"/lib/libpython3*.so.1.0 2>/dev/null | head -n 1 || true)
    if [ -z "$lib" ]; then
        echo "skip $version: no shared libpython" >&2
        continue
    fi
    "$bin" layout --from "$lib" --python-version "$version" --out "$out"
    have[${version%.*}]=1
done

sid=${GILSAMPLE_SID_ROOT:-/var/tmp/gilsample-sid}
if [ -d "$sid" ]; then
    for exe in "$sid"/usr/bin/python3.[0-9]*; do
        name=$(basename "$exe")
        [[ "$name" =~ ^python3\.[0-9]+d?$ ]] || continue
        minor=${name#python}; minor=${minor%d}
        full=$(chroot "$sid" "/usr/bin/$name" -c 'import platform; print(platform.python_version())')
        if [[ "$name" == *d ]]; then
            # Debug builds keep their DWARF in the executable.
            "$bin" layout --from "$exe" --python-version "$full" --out "$out"
            continue
        fi
        [ -n "${have[$minor]:-}" ] && continue
        id=$(readelf -n "$exe" | awk '/Build ID/ {print $3}')
        debug="$sid/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug"
        "$bin" layout --from "$debug" --binary "$exe" --python-version "$full" --out "$out"
    done
else
    echo "no Debian sid root at $sid (scripts/make-sid-root.sh makes one): 3.14, 3.15 and debug builds not regenerated" >&2
fi

arm=${GILSAMPLE_ARM64_ROOT:-/var/tmp/gilsample-arm64}
if [ -d "$arm" ]; then
    for exe in "$arm"/usr/bin/python3.[0-9]*; do
        name=$(basename "$exe")
        [[ "$name" =~ ^python3\.[0-9]+d?$ ]] || continue
        if [[ "$name" == *d ]]; then
            "$bin" layout --from "$exe" --out "$out"
            continue
        fi
        id=$(readelf -n "$exe" | awk '/Build ID/ {print $3}')
        "$bin" layout --from "$arm/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug" --binary "$exe" --out "$out"
    done
else
    echo "no arm64 builds at $arm (scripts/fetch-arm64-builds.sh unpacks them): aarch64 layouts not regenerated" >&2
fi
