#!/usr/bin/env bash
# Checks that Cargo.toml's rust-version is still the oldest toolchain that can build gilsample, as far
# as the crates say it: the highest `rust-version` any dependency in Cargo.lock declares (normal,
# build and dev dependencies, on the Linux targets gilsample ships for) and the edition's own minimum.
# Only one toolchain is installed here, so this is what can be checked; clippy's incompatible_msrv
# lint (in `cargo clippy -D warnings`) then refuses standard-library APIs newer than rust-version.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

for target in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu; do
    cargo metadata --locked --format-version 1 --filter-platform "$target"
done | python3 -c '
import json, sys

EDITION_MINIMUM = {"2015": (1, 0), "2018": (1, 31), "2021": (1, 56), "2024": (1, 85)}

def version(text):
    return tuple(int(part) for part in text.split(".")[:2])

declared_by = {}
ours = None
for line in sys.stdin:
    metadata = json.loads(line)
    packages = {p["id"]: p for p in metadata["packages"]}
    root = metadata["resolve"]["root"]
    ours = packages[root]
    # Only what the resolver links for the target: packages reachable from gilsample.
    nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
    seen, todo = set(), [root]
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        todo += nodes[node]["dependencies"]
    for package_id in seen - {root}:
        package = packages[package_id]
        if package.get("rust_version"):
            declared_by[package["name"] + " " + package["version"]] = version(package["rust_version"])

if not ours.get("rust_version"):
    sys.exit("check-rust-version: Cargo.toml has no rust-version")
needed = max([EDITION_MINIMUM[ours["edition"]]] + list(declared_by.values()))
why = sorted(name for name, v in declared_by.items() if v == needed) or ["edition " + ours["edition"]]
have = version(ours["rust_version"])
needed_text = "%d.%d" % needed
if have != needed:
    sys.exit("check-rust-version: Cargo.toml says rust-version %s, but the oldest toolchain the "
             "dependencies allow is %s (%s); set rust-version = \"%s\""
             % (ours["rust_version"], needed_text, ", ".join(why), needed_text))
print("check-rust-version: rust-version %s = the highest any dependency declares (%s)"
      % (ours["rust_version"], ", ".join(why)))
'
