#!/usr/bin/env bash
# Runs the aarch64 gilsample against live arm64 CPythons under a real arm64 kernel: boots Debian's arm64
# kernel under qemu-system-aarch64 (TCG emulation, 2 CPUs) with an initramfs of Debian bookworm's arm64
# Python 3.11 (also as a PIE embedding the shared libpython) and sid's 3.13 (scripts/aarch64/make-vm.sh,
# made once and cached), the aarch64 binary and
# the bundled workload, and runs there the checks of scripts/aarch64/guest_checks.py: per interpreter a
# 3-thread contention recording, a lone sleeper, a GIL-free native call, a launch, SIGINT, every layout
# source (DWARF from the -dbg packages too), `gilsample info`, the GIL's waiter counts and its mutex
# owner; then the aarch64 wheel (target/wheels/gilsample-*aarch64*.whl, when present) installed with
# `pip install --no-index` into a venv and recording through `import gilsample`.
# Prints `N passed, N failed`; exits non-zero on a failure.
# What the guest captured (its /proc syscall lines, the GIL's bytes, `info`) lands in
# $GILSAMPLE_AARCH64_CAPTURE (default target/aarch64-capture), the source of fixtures/aarch64/.
#
# Usage: scripts/test-aarch64.sh [--smoke] [--binary PATH] [--pages 4k|16k] [--tools-only]
#   --smoke        only the contention recording under 3.11 (what CI runs)
#   --binary PATH  the aarch64 gilsample to test (default: cargo build --release for aarch64)
#   --pages 16k    boot sid's arm64 kernel with 16K pages instead of bookworm's 4K one (the mappings'
#                  offsets and the load bias then follow 16K pages, as on 64K-page server kernels)
#   --tools-only   install what is missing of the tools below, then stop
# Needs qemu-system-arm, cpio and the aarch64 cross C compiler (gcc-aarch64-linux-gnu with
# libc6-dev-arm64-cross: the VM's PIE launcher, scripts/aarch64/python-pie.c, and the linker of a
# `cargo build --target aarch64-unknown-linux-gnu`), each installed with apt-get when missing (as
# root), Rust's aarch64 target (rustup, when the binary is built here), and the network the first
# time, to download the VM's packages.
# The whole run is bounded by $GILSAMPLE_AARCH64_TIMEOUT seconds (default 1800).
set -euo pipefail
cd "$(dirname "$0")/.."
subset=full
binary=
pages=4k
tools_only=no
while [ $# -gt 0 ]; do
    case "$1" in
    --smoke) subset=smoke ;;
    --tools-only) tools_only=yes ;;
    --pages)
        pages=$2
        shift
        ;;
    --binary)
        binary=$2
        shift
        ;;
    *)
        echo "usage: $0 [--smoke] [--binary PATH] [--pages 4k|16k] [--tools-only]" >&2
        exit 2
        ;;
    esac
    shift
done
cache=${GILSAMPLE_AARCH64_VM:-/var/tmp/gilsample-aarch64-vm}
capture=${GILSAMPLE_AARCH64_CAPTURE:-target/aarch64-capture}
limit=${GILSAMPLE_AARCH64_TIMEOUT:-1800}
case "$pages" in
4k | 16k) ;;
*)
    echo "--pages: 4k or 16k, not $pages" >&2
    exit 2
    ;;
esac
kernel=$cache/Image
cpu=cortex-a72
if [ "$pages" = 16k ]; then
    # sid's kernel with 16K pages; the Cortex-A72 knows only 4K and 64K pages, QEMU's `max` all three.
    kernel=$cache/Image-16k
    cpu=max,pauth=off
fi
t0=$(date +%s)

# Each missing tool by the Debian package that has it.
packages=()
command -v qemu-system-aarch64 >/dev/null || packages+=(qemu-system-arm)
command -v cpio >/dev/null || packages+=(cpio)
command -v aarch64-linux-gnu-gcc >/dev/null || packages+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
if [ ${#packages[@]} -gt 0 ]; then
    echo "installing ${packages[*]}"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${packages[@]}"
fi
[ "$tools_only" = no ] || exit 0
scripts/aarch64/make-vm.sh
t_vm=$(date +%s)
if [ -z "$binary" ]; then
    rustup target list --installed | grep -qx aarch64-unknown-linux-gnu ||
        rustup target add aarch64-unknown-linux-gnu
    cargo build --locked --release --target aarch64-unknown-linux-gnu
    binary=target/aarch64-unknown-linux-gnu/release/gilsample
fi
[ -x "$binary" ] || { echo "no aarch64 gilsample at $binary" >&2; exit 1; }
[ -f "$kernel" ] || { echo "no kernel at $kernel (16K pages come with sid: GILSAMPLE_AARCH64_SID=yes)" >&2; exit 1; }
# e_machine, bytes 18-19 of the ELF header: 0xb7 is EM_AARCH64.
if [ "$(od -An -tx1 -j18 -N2 "$binary" | tr -d ' ')" != b700 ]; then
    echo "$binary is not an aarch64 executable" >&2
    exit 1
fi
t_build=$(date +%s)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
opt="$work/overlay/opt/gilsample"
mkdir -p "$opt"
install -m 755 scripts/aarch64/guest-init.sh "$work/overlay/init"
install -m 755 "$binary" "$opt/gilsample"
install -m 644 fixtures/workloads/gil_workload.py scripts/aarch64/guest_checks.py "$opt/"
args="--gilsample /opt/gilsample/gilsample --workload /opt/gilsample/gil_workload.py --subset $subset"
if [ -d "$cache/root/sid/usr/bin" ]; then
    args="$args --sid"
else
    echo "sid's Python 3.13 is left out: the VM was made with GILSAMPLE_AARCH64_SID=no"
fi
wheel=
[ -d target/wheels ] && wheel=$(find target/wheels -maxdepth 1 -name 'gilsample-*aarch64*.whl' | sort | tail -1)
if [ -n "$wheel" ]; then
    mkdir -p "$opt/wheels"
    cp "$wheel" "$opt/wheels/"
    args="$args --wheel /opt/gilsample/wheels/$(basename "$wheel")"
fi
echo "$args" >"$opt/args"
# Two concatenated newc archives: the cached root, then this run's files over it.
(cd "$work/overlay" && find . -print0 | cpio --null -o -H newc --quiet --owner 0:0) >"$work/overlay.cpio"
cat "$cache/root.cpio" "$work/overlay.cpio" >"$work/initrd"

log="$work/console.log"
echo "booting the arm64 guest ($subset checks, $pages pages, at most $limit s)..."
set +e
# TCG: one host thread per guest CPU. Niced so that builds beside it still progress.
timeout -k 10 "$limit" nice -n 10 qemu-system-aarch64 -M virt -cpu "$cpu" -smp 2 -m 2048 \
    -nographic -monitor none -no-reboot -nic none \
    -kernel "$kernel" -initrd "$work/initrd" \
    -append "console=ttyAMA0 rdinit=/init panic=-1 quiet loglevel=3" </dev/null 2>&1 |
    tee "$log" | grep --line-buffered '^@@ ' | grep --line-buffered -v '^@@ capture '
qemu_status=${PIPESTATUS[0]}
set -e
t_end=$(date +%s)
tr -d '\r' <"$log" >"$log.txt"

rm -rf "$capture"
mkdir -p "$capture"
sed -n '/^@@ capture begin$/,/^@@ capture end$/p' "$log.txt" | sed '1d;$d' | base64 -d 2>/dev/null |
    tar -xz -C "$capture" 2>/dev/null || true
cp "$log.txt" "$capture/console.log"

passed=$(grep -c '^@@ PASS ' "$log.txt" || true)
failed=$(grep -c '^@@ FAIL ' "$log.txt" || true)
if ! grep -q '^@@ [0-9]* passed, [0-9]* failed$' "$log.txt"; then
    echo "the guest did not finish its checks (qemu exit $qemu_status; 124 = timed out after $limit s);" \
        "its console is in $capture/console.log"
    failed=$((failed + 1))
fi
booted=$(sed -n 's/^@@ booted in \([0-9.]*\) s.*/\1/p' "$log.txt")
echo "times: VM ready $((t_vm - t0)) s, binary $((t_build - t_vm)) s, guest boot ${booted:-?} s," \
    "guest total $((t_end - t_build)) s; captured under $capture"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
