#!/usr/bin/env bash
# The Python package's tests: builds the wheel (the gilsample binary inside, as `pip install` ships
# it), installs it into a fresh venv of every pyenv interpreter 3.7-3.13, and runs tests/python there.
# A missing interpreter fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
if ! command -v strace >/dev/null; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends strace
fi
# As a module: a freshly pip-installed command is not on PATH under pyenv until its shims are rehashed.
python3 -m maturin --version >/dev/null 2>&1 || python3 -m pip install --quiet "maturin==1.16.0"
rm -rf target/wheels
python3 -m maturin build --profile dev --locked --out target/wheels
wheel=$(ls target/wheels/gilsample-*.whl)
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
    echo "== Python package tests under $("$venv"/bin/python -V)"
    # From outside the checkout, so `import gilsample` is the installed wheel, not python/.
    (cd target && "../$venv/bin/python" -m unittest discover -s ../tests/python -v) || status=1
done
exit $status
