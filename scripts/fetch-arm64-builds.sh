#!/usr/bin/env bash
# Unpacks Debian's arm64 CPython builds (never run here) so layouts for aarch64 can be generated from
# their DWARF and checked against them: python3.X-minimal (the interpreter) and python3.X-dbg (its
# detached DWARF and the python3.Xd debug build), from sid (3.13-3.15, through the sid root of
# scripts/make-sid-root.sh) and from this machine's Debian release (3.11). `dpkg -x` only unpacks.
# Usage: scripts/fetch-arm64-builds.sh   (into $GILSAMPLE_ARM64_ROOT, default /var/tmp/gilsample-arm64)
set -euo pipefail
out=${GILSAMPLE_ARM64_ROOT:-/var/tmp/gilsample-arm64}
sid=${GILSAMPLE_SID_ROOT:-/var/tmp/gilsample-sid}
want="3.11 3.13 3.14 3.15"
ready() {
    for v in $want; do
        [ -f "$out/usr/bin/python$v" ] && [ -f "$out/usr/bin/python${v}d" ] || return 1
    done
}
if ready; then
    echo "arm64 builds ready: $out"
    exit 0
fi
debs=$(mktemp -d)
chmod 755 "$debs"
# sid's 3.13-3.15, downloaded by the sid root's apt.
chroot "$sid" dpkg --add-architecture arm64
chroot "$sid" apt-get update
mkdir -p "$sid/tmp/arm64-debs"
chroot "$sid" sh -c 'cd /tmp/arm64-debs && apt-get download python3.13-minimal:arm64 python3.13-dbg:arm64 python3.14-minimal:arm64 python3.14-dbg:arm64 python3.15-minimal:arm64 python3.15-dbg:arm64'
mv "$sid"/tmp/arm64-debs/*.deb "$debs"/
# 3.11 from this machine's release.
dpkg --add-architecture arm64
apt-get update
(cd "$debs" && apt-get download python3.11-minimal:arm64 python3.11-dbg:arm64)
mkdir -p "$out"
for deb in "$debs"/*.deb; do
    dpkg -x "$deb" "$out"
done
rm -rf "$debs"
ready
echo "arm64 builds ready: $out"
