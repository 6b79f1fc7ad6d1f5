#!/usr/bin/env bash
# Makes what scripts/test-aarch64.sh boots: an arm64 Debian kernel (the cloud flavour: PL011 console
# and initramfs support built in, no modules needed) and an initramfs root of Debian bookworm's arm64
# Python 3.11 with busybox and pip, unpacked from the packages with `dpkg -x` (nothing is configured or
# run here, so no qemu-user second stage), and the same Python as a PIE that embeds the shared
# libpython (python-pie.c, cross-compiled: needs aarch64-linux-gnu-gcc). sid's arm64 Python 3.13 and
# the libraries it needs (its own, newer glibc) are unpacked under /sid of the same root, which the
# guest enters with chroot (GILSAMPLE_AARCH64_SID=no leaves it out). Of the -dbg packages only each
# interpreter's detached DWARF is kept (found by build-id: needs readelf). With sid comes sid's arm64
# kernel with 16K pages, as Image-16k.
# Idempotent and cached: a root made from the same package lists is left alone.
# Usage: scripts/aarch64/make-vm.sh   (into $GILSAMPLE_AARCH64_VM, default /var/tmp/gilsample-aarch64-vm)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${GILSAMPLE_AARCH64_VM:-/var/tmp/gilsample-aarch64-vm}
mirror=${GILSAMPLE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${GILSAMPLE_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}

# Bookworm: the interpreter, the libraries its stdlib's extension modules link (ctypes: libffi,
# hashlib: libssl), busybox for /init, and pip for the wheel check.
bookworm_arm64="busybox-static libc6 libgcc-s1 gcc-12-base libbz2-1.0 libcrypt1 libdb5.3 libexpat1 libffi8
 liblzma5 libncursesw6 libtinfo6 libnsl2 libtirpc3 libgssapi-krb5-2 libk5crypto3 libkeyutils1 libkrb5-3
 libkrb5support0 libcom-err2 libreadline8 libsqlite3-0 libssl3 libuuid1 zlib1g
 libpython3.11-minimal libpython3.11-stdlib python3.11-minimal libpython3.11"
bookworm_all="python3-pip python3-setuptools python3-wheel python3-pkg-resources python3-distutils python3-lib2to3"
# sid: 3.13 and what its stdlib needs, against sid's own glibc.
sid_arm64="libc6 libgcc-s1 libffi8 libssl3t64 zlib1g libexpat1 libzstd1 liblzma5 libbz2-1.0 libuuid1
 libmpdec4 libpython3.13-minimal libpython3.13-stdlib python3.13-minimal"
with_sid=${GILSAMPLE_AARCH64_SID:-yes}
recipe="bookworm: $bookworm_arm64 $bookworm_all; sid($with_sid): $sid_arm64"
recipe="$recipe; dwarf: python3.11-dbg python3.13-dbg; pie; 16k; v5"

if [ -f "$cache/recipe" ] && [ "$(cat "$cache/recipe")" = "$recipe" ] && [ -f "$cache/Image" ] &&
    [ -f "$cache/root.cpio" ]; then
    echo "aarch64 VM ready: $cache"
    exit 0
fi
start=$(date +%s)
rm -rf "$cache"
mkdir -p "$cache/apt/lists/partial" "$cache/apt/archives/partial"
mkdir -p "$cache/debs/bookworm" "$cache/debs/sid" "$cache/debs/dbg"
chmod -R 755 "$cache"

# arm64 packages come through a private apt configuration (its own sources, lists and cache under
# $cache/apt): the host's dpkg architectures, sources and the sid root stay as they are.
opts=(-o "Dir::Etc::SourceList=$cache/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$cache/apt/lists" -o "Dir::Cache=$cache/apt" -o Dir::State::status=/dev/null
    -o APT::Architecture=arm64 -o APT::Architectures=arm64 -o Acquire::Languages=none
    -o Acquire::Check-Valid-Until=false -o Debug::NoLocking=1)
use_suites() { # use_suites SUITE...: point the private apt at these suites and read their lists
    : >"$cache/apt/sources.list"
    for suite in "$@"; do
        url=$mirror
        case "$suite" in *-security) url=$security ;; esac
        echo "deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $url $suite main" \
            >>"$cache/apt/sources.list"
    done
    rm -rf "$cache/apt/lists"
    mkdir -p "$cache/apt/lists/partial"
    apt-get -q "${opts[@]}" update >/dev/null
}
# keep_dwarf DBG_PACKAGE ROOT EXE: of a -dbg package, only the detached DWARF of ROOT's EXE (found
# by its build-id, where gdb and gilsample look), so that `--layout-source dwarf` is tested too.
keep_dwarf() {
    local id
    rm -rf "$cache/debs/dbg"/*
    fetch "$cache/debs/dbg" "$1"
    dpkg -x "$cache"/debs/dbg/*.deb "$cache/debs/dbg/x"
    id=$(readelf -n "$2$3" | awk '/Build ID:/ {print $3}')
    mkdir -p "$2/usr/lib/debug/.build-id/${id:0:2}"
    cp "$cache/debs/dbg/x/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug" \
        "$2/usr/lib/debug/.build-id/${id:0:2}/"
}

fetch() { # fetch DEST PACKAGE...: download these packages into DEST
    local dest=$1
    shift
    # apt says "unsandboxed as root" for every package when run as root; the count below is the check.
    (cd "$dest" && { apt-get -q "${opts[@]}" download "$@" 2>&1 | grep -v 'unsandboxed as root' || true; })
    if [ "$(find "$dest" -name '*.deb' | wc -l)" -lt "$#" ]; then
        echo "could not download every package of: $*" >&2
        exit 1
    fi
}

use_suites bookworm bookworm-updates bookworm-security
# The cloud flavour's metapackage names the current kernel package.
kernel_pkg=$(apt-cache "${opts[@]}" depends linux-image-cloud-arm64 |
    awk '/Depends: linux-image-/ {print $2; exit}')
if [ -z "$kernel_pkg" ]; then
    echo "no arm64 cloud kernel in bookworm (apt-cache depends linux-image-cloud-arm64)" >&2
    exit 1
fi
# shellcheck disable=SC2086  # the package lists are words
fetch "$cache/debs/bookworm" "$kernel_pkg" $bookworm_arm64 $bookworm_all

root="$cache/root"
mkdir -p "$root"
for deb in "$cache"/debs/bookworm/*.deb; do
    case "$deb" in
    */linux-image-*) dpkg -x "$deb" "$cache/kernel" ;;
    *) dpkg -x "$deb" "$root" ;;
    esac
done
cp "$cache"/kernel/boot/vmlinuz-* "$cache/Image"
cp "$cache"/kernel/boot/config-* "$cache/kernel-config"
rm -rf "$cache/kernel"
ln -sf python3.11 "$root/usr/bin/python3"
keep_dwarf python3.11-dbg "$root" /usr/bin/python3.11
mkdir -p "$root/usr/local/bin"
aarch64-linux-gnu-gcc -O2 -fPIE -pie -o "$root/usr/local/bin/python3.11-pie" "$here/python-pie.c" \
    "$root/usr/lib/aarch64-linux-gnu/libpython3.11.so.1.0" -Wl,--allow-shlib-undefined
# Debian's interpreters precompile their stdlib on installation; do the same here, once, so no boot
# spends emulated minutes compiling it (bytecode is the same on every architecture of one release).
host_python=$(command -v python3.11 || true)
if [ -n "$host_python" ]; then
    "$host_python" -m compileall -q -j 0 -s "$root" -p / "$root/usr/lib/python3.11" \
        "$root/usr/lib/python3/dist-packages" >/dev/null || true
fi

if [ "$with_sid" = yes ]; then
    use_suites sid
    # shellcheck disable=SC2086
    fetch "$cache/debs/sid" $sid_arm64
    mkdir -p "$root/sid"
    for deb in "$cache"/debs/sid/*.deb; do
        dpkg -x "$deb" "$root/sid"
    done
    # sid's packages are usr-merged: the loader's /lib path must resolve inside the chroot.
    for d in bin lib sbin; do
        [ -e "$root/sid/$d" ] || ln -s "usr/$d" "$root/sid/$d"
    done
    mkdir -p "$root/sid/proc" "$root/sid/dev" "$root/sid/tmp"
    keep_dwarf python3.13-dbg "$root/sid" /usr/bin/python3.13
    # sid's kernel with 16K pages (Image-16k, for test-aarch64.sh --pages 16k): the metapackage names
    # the kernel package, which names the package with the Image in it.
    k16=$(apt-cache "${opts[@]}" depends linux-image-arm64-16k | awk '/Depends: linux-image-/ {print $2; exit}')
    k16_binary=$(apt-cache "${opts[@]}" depends "$k16" | awk '/Depends: linux-binary-/ {print $2; exit}')
    rm -rf "$cache/debs/dbg"/*
    fetch "$cache/debs/dbg" "${k16_binary:-$k16}"
    dpkg -x "$cache"/debs/dbg/*.deb "$cache/debs/dbg/x"
    find "$cache/debs/dbg/x" -name 'vmlinuz*' -exec cp {} "$cache/Image-16k" \;
    [ -f "$cache/Image-16k" ] || { echo "no Image in ${k16_binary:-$k16}" >&2; exit 1; }
fi

mkdir -p "$root/proc" "$root/sys" "$root/dev" "$root/tmp" "$root/run"
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/locale"
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet --owner 0:0) >"$cache/root.cpio"
rm -rf "$cache/debs" "$cache/apt"
echo "$recipe" >"$cache/recipe"
echo "aarch64 VM ready: $cache ($(du -sh "$cache/root.cpio" | cut -f1) root, made in $(($(date +%s) - start)) s)"
