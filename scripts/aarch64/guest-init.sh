#!/bin/busybox sh
# shellcheck shell=dash
# /init of the arm64 guest that scripts/test-aarch64.sh boots: mounts what gilsample reads (/proc) and
# what the workloads need, runs the checks with the guest's own Python 3.11, sends back what they
# captured, then powers the machine off. Everything goes to the serial console, which the host reads;
# the host matches only lines that start with "@@" (the kernel's lines never do).
/bin/busybox mkdir -p /bb
/bin/busybox --install -s /bb
export PATH=/usr/bin:/bin:/usr/sbin:/sbin:/bb
export HOME=/root LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1
mkdir -p /root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
if [ -d /sid/usr/bin ]; then
    mount --bind /proc /sid/proc
    mount --bind /dev /sid/dev
    mount -t tmpfs tmpfs /sid/tmp
fi
echo "@@ booted in $(cut -d' ' -f1 /proc/uptime) s: $(uname -m) $(uname -r), $(nproc) CPUs"
mkdir -p /tmp/capture
# shellcheck disable=SC2046  # the host's arguments are words
python3.11 /opt/gilsample/guest_checks.py --capture /tmp/capture $(cat /opt/gilsample/args)
echo "@@ checks exited with $?"
echo "@@ capture begin"
tar -C /tmp/capture -cz . | base64
echo "@@ capture end"
echo "@@ done in $(cut -d' ' -f1 /proc/uptime) s"
sync
poweroff -f
