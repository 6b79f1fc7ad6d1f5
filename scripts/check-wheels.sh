#!/usr/bin/env bash
# Checks the wheels scripts/build-wheels.sh makes (building them first, incrementally): one
# manylinux_2_17 wheel per architecture, the binary inside of that architecture and needing no glibc
# symbol newer than 2.17, so that it runs where manylinux2014 promises. The wheel's install into every
# pyenv interpreter is scripts/test-python.sh's.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build-wheels.sh

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
fail() {
    echo "check-wheels: $*" >&2
    status=1
}

for arch in x86_64 aarch64; do
    wheels=(target/wheels/gilsample-"$version"-*manylinux_2_17_"$arch".whl)
    if [ ${#wheels[@]} -ne 1 ] || [ ! -f "${wheels[0]}" ]; then
        fail "expected one gilsample $version manylinux_2_17 wheel for $arch in target/wheels, found: ${wheels[*]}"
        continue
    fi
    wheel=${wheels[0]}
    python3 -m zipfile -e "$wheel" "$work/$arch"
    binary=$work/$arch/gilsample-$version.data/scripts/gilsample
    [ -f "$binary" ] || {
        fail "$wheel has no gilsample-$version.data/scripts/gilsample"
        continue
    }
    info=$work/$arch/gilsample-$version.dist-info
    grep -qx "Tag: py3-none-manylinux_2_17_$arch" "$info/WHEEL" ||
        fail "$wheel: its WHEEL file does not say the manylinux_2_17_$arch tag"
    cmp -s LICENSE "$info/licenses/LICENSE" || fail "$wheel: LICENSE is not in it"
    grep -qx "License-Expression: MIT" "$info/METADATA" || fail "$wheel: its METADATA names no MIT license"

    machine=$(readelf -h "$binary" | sed -n 's/^ *Machine: *//p')
    case "$arch" in
        x86_64) want_machine="Advanced Micro Devices X86-64" ;;
        aarch64) want_machine="AArch64" ;;
    esac
    [ "$machine" = "$want_machine" ] || fail "$wheel: the binary is a '$machine' ELF, not $want_machine"

    # The glibc symbol versions the binary needs. objdump reads only the host's architecture;
    # readelf reads both and lists the same versions.
    if [ "$arch" = x86_64 ]; then
        needed=$(objdump -T "$binary" | grep -oE 'GLIBC_[0-9]+(\.[0-9]+)+' | sort -uV)
    else
        needed=$(readelf -W --dyn-syms "$binary" | grep -oE '@GLIBC_[0-9]+(\.[0-9]+)+' | tr -d @ | sort -uV)
    fi
    newest=$(echo "$needed" | tail -n 1)
    [ -n "$newest" ] || fail "$wheel: no glibc symbol versions found in the binary"
    newer=$(printf '%s\n' $needed GLIBC_2.17 | sort -uV | sed -n '/^GLIBC_2\.17$/,$p' | tail -n +2)
    [ -z "$newer" ] || fail "$wheel: the binary needs glibc symbols newer than 2.17: $(echo $newer)"
    echo "check-wheels: $(basename "$wheel"): $machine, $(stat -c %s "$binary") bytes, newest glibc symbol $newest"
done
exit $status
