#!/usr/bin/env bash
# Makes the Debian sid root the tests record from: python3.13, 3.14 and 3.15 as Debian ships them
# (static, non-PIE, stripped, `_PyRuntime` in .dynsym) with their -dbg packages (detached DWARF found by
# build-id, and the python3.Xd debug builds). About 1.2 GB; a few minutes on a fresh machine.
# Idempotent: a complete root is left alone.
# Usage: scripts/make-sid-root.sh   (root: $GILSAMPLE_SID_ROOT, default /var/tmp/gilsample-sid)
set -euo pipefail
root=${GILSAMPLE_SID_ROOT:-/var/tmp/gilsample-sid}
packages="python3.13 python3.13-dbg python3.14 python3.14-dbg python3.15 python3.15-dbg"
ready() {
    for exe in python3.13 python3.14 python3.15 python3.13d python3.14d python3.15d; do
        [ -x "$root/usr/bin/$exe" ] || return 1
    done
}
if ready; then
    echo "sid root ready: $root"
    exit 0
fi
if ! command -v debootstrap >/dev/null; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap
fi
if [ ! -x "$root/usr/bin/apt-get" ]; then
    rm -rf "$root"
    debootstrap --variant=minbase sid "$root"
fi
# sid's Release file can look expired to apt.
echo 'Acquire::Check-Valid-Until "false";' > "$root/etc/apt/apt.conf.d/99gilsample-no-valid-until"
chroot "$root" apt-get update
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $packages
ready
echo "sid root ready: $root"
