#!/usr/bin/env bash
# Runs the README's install recipes as written, taken from README.md itself so that the two cannot
# drift apart, against the x86_64 wheel scripts/build-wheels.sh makes (building it first,
# incrementally):
#   - `pip install target/wheels/...whl` into a fresh venv: the `gilsample` command must run there;
#   - "the wheel's binary alone": the file it leaves must be executable and run.
# Globs must match (bash's failglob): a recipe whose glob matches nothing fails here, as it would
# for a user. pip is kept offline (PIP_NO_INDEX): the wheel has no dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build-wheels.sh x86_64
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
python=$(ls -d "$root"/versions/3.*/bin/python 2>/dev/null | sort -V | tail -n 1 || true)
[ -n "$python" ] || python=python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
fail() {
    echo "check-readme-install: $*" >&2
    status=1
}

# The table's first row: "`scripts/build-wheels.sh`, then `pip install ...`".
pip_recipe=$(sed -n 's/^| `scripts\/build-wheels.sh`, then `\(pip install [^`]*\)`.*/\1/p' README.md)
# The row "the wheel's binary alone": "one file: `...`".
binary_recipe=$(sed -n "s/^| the wheel's binary alone | one file: \`\([^\`]*\)\`.*/\1/p" README.md)
[ -n "$pip_recipe" ] || fail "README.md has no 'pip install' recipe in its install table"
[ -n "$binary_recipe" ] || fail "README.md has no 'the wheel's binary alone' recipe"

if [ -n "$pip_recipe" ]; then
    "$python" -m venv "$work/venv"
    echo "check-readme-install: $pip_recipe"
    if PATH="$work/venv/bin:$PATH" PIP_NO_INDEX=1 bash -O failglob -c "$pip_recipe" >"$work/pip.log" 2>&1; then
        said=$("$work/venv/bin/gilsample" --version 2>&1) || said="(failed: $said)"
        [ "$said" = "gilsample $version" ] || fail "after '$pip_recipe', gilsample --version said '$said'"
    else
        fail "'$pip_recipe' failed: $(cat "$work/pip.log")"
    fi
fi

if [ -n "$binary_recipe" ]; then
    # From a directory of its own, with the wheels where the recipe looks for them.
    mkdir -p "$work/alone/target"
    ln -s "$PWD/target/wheels" "$work/alone/target/wheels"
    echo "check-readme-install: $binary_recipe"
    if (cd "$work/alone" && PATH="$(dirname "$python"):$PATH" bash -O failglob -c "$binary_recipe") >"$work/alone.log" 2>&1; then
        said=$("$work/alone/gilsample" --version 2>&1) || said="(failed: $said)"
        [ "$said" = "gilsample $version" ] || fail "after '$binary_recipe', ./gilsample --version said '$said'"
    else
        fail "'$binary_recipe' failed: $(cat "$work/alone.log")"
    fi
fi
[ $status -ne 0 ] || echo "check-readme-install: both recipes work as written"
exit $status
