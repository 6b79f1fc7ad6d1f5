#!/usr/bin/env bash
# Builds the wheels users install, into target/wheels/: manylinux2014 (manylinux_2_17) for x86_64 and
# aarch64, each with the release gilsample binary and the Python package inside.
#
# maturin links with zig against glibc 2.17's symbol versions, so one x86_64 machine builds both
# wheels without a manylinux container or a cross C toolchain, and the binaries run on every glibc
# distribution from 2.17 on (RHEL/CentOS 7, Ubuntu 18.04, the openEuler releases of Ascend servers).
# Both tools come from PyPI into a venv of their own (target/wheel-tools), pinned below.
#
#   scripts/build-wheels.sh                 both architectures
#   scripts/build-wheels.sh x86_64          one (x86_64 or aarch64)
#
# Rebuilding is incremental: with nothing changed, cargo only relinks nothing and maturin repacks.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

MATURIN_VERSION=1.16.0
ZIG_VERSION=0.17.1
tools=target/wheel-tools
out=target/wheels

arches=("$@")
[ ${#arches[@]} -gt 0 ] || arches=(x86_64 aarch64)
for arch in "${arches[@]}"; do
    case "$arch" in
        x86_64 | aarch64) ;;
        *)
            echo "build-wheels: unknown architecture '$arch': give x86_64 or aarch64" >&2
            exit 2
            ;;
    esac
done

have_tools() {
    [ "$("$tools/bin/maturin" --version 2>/dev/null)" = "maturin $MATURIN_VERSION" ] &&
        [ "$("$tools/bin/python" -m ziglang version 2>/dev/null)" = "$ZIG_VERSION" ]
}
if ! have_tools; then
    echo "build-wheels: installing maturin $MATURIN_VERSION and zig $ZIG_VERSION into $tools (once, from PyPI: zig is the larger download)" >&2
    rm -rf "$tools"
    python3 -m venv "$tools"
    "$tools/bin/python" -m pip install --quiet "maturin==$MATURIN_VERSION" "ziglang==$ZIG_VERSION"
    have_tools || {
        echo "build-wheels: maturin $MATURIN_VERSION and ziglang $ZIG_VERSION did not install into $tools" >&2
        exit 1
    }
fi

mkdir -p "$out"
for arch in "${arches[@]}"; do
    target=$arch-unknown-linux-gnu
    rustup target list --installed | grep -qx "$target" || rustup target add "$target"
    # One wheel per architecture: an older version's would be installed by a glob just as well.
    rm -f "$out"/gilsample-*_"$arch".whl
    echo "build-wheels: building the $arch wheel (a release build: a few minutes the first time)" >&2
    # maturin finds zig as `python -m ziglang` of the interpreter it runs under: the tools' venv.
    PATH="$PWD/$tools/bin:$PATH" maturin build --release --locked --target "$target" \
        --zig --compatibility manylinux2014 --out "$out"
done
ls -l "$out"
