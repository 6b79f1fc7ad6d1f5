#!/usr/bin/env bash
# The Python package's tests, on the x86_64 wheel users install (scripts/build-wheels.sh: manylinux2014,
# the release binary inside; rebuilt incrementally, so a wheel CI already built is reused as is): it is
# installed with `pip install --no-index` into a fresh venv of every pyenv interpreter 3.7-3.13, must give
# a working `gilsample --version` and `import gilsample` there, and then runs tests/python.
# A missing interpreter fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
if ! command -v strace >/dev/null; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends strace
fi
scripts/build-wheels.sh x86_64
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
wheel=$(ls target/wheels/gilsample-"$version"-*manylinux_2_17_x86_64.whl)
status=0
for minor in 3.7 3.8 3.9 3.10 3.11 3.12 3.13; do
    python=$(ls -d "$root"/versions/"$minor".*/bin/python 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -z "$python" ]; then
        echo "test-python: expected interpreter $minor is missing under $root/versions" >&2
        status=1
        continue
    fi
    venv=target/py-venvs/$minor
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv"/bin/pip install --quiet --no-index "$wheel"
    said=$("$venv"/bin/gilsample --version) || said="(failed)"
    if [ "$said" != "gilsample $version" ]; then
        echo "test-python: under $minor, the wheel's gilsample --version said '$said', not 'gilsample $version'" >&2
        status=1
    fi
    # From outside the checkout, so that it is the installed package that is imported.
    if ! (cd target && "../$venv/bin/python" -c "import gilsample, os; assert os.path.isabs(gilsample.binary_path())"); then
        echo "test-python: under $minor, import gilsample from the wheel failed" >&2
        status=1
    fi
    echo "== Python package tests under $("$venv"/bin/python -V)"
    # From outside the checkout, so `import gilsample` is the installed wheel, not python/.
    (cd target && "../$venv/bin/python" -m unittest discover -s ../tests/python -v) || status=1
done
exit $status
