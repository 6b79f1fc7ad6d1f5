#!/usr/bin/env bash
# The test command: prepares what the live tests record from, then runs the whole suite.
#   - pyenv builds 3.7-3.13 under $(pyenv root)/versions (part of the machine image);
#   - Debian's /usr/bin/python3.11, and tmux (tests/top.rs runs gilsample top in it);
#   - the Debian sid root with python3.13-3.15 and their -dbg packages (scripts/make-sid-root.sh);
#   - Debian's arm64 builds, unpacked, for the aarch64 layout check (scripts/fetch-arm64-builds.sh).
# Then the manylinux2014 wheels (scripts/check-wheels.sh: built by scripts/build-wheels.sh, incrementally),
# the README's install recipes run as written against them (scripts/check-readme-install.sh),
# the Python package from the x86_64 wheel under every pyenv interpreter (scripts/test-python.sh), and
# the traces in the Perfetto UI in headless Chromium (scripts/test-viewer.sh).
# Needs root (chroot, mount, ptrace access to the test processes). A missing interpreter fails the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# python3.11: Debian's static build under test; tmux: the real terminal tests/top.rs drives.
missing=()
[ -x /usr/bin/python3.11 ] || missing+=(python3.11)
command -v tmux > /dev/null || missing+=(tmux)
if [ "${#missing[@]}" -gt 0 ]; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
# Each part's wall time is printed as it ends (.ci/run keeps CI under 25 minutes with them).
part() {
    local started=$SECONDS
    "$@"
    echo "test.sh: $* took $((SECONDS - started)) s" >&2
}
part scripts/make-sid-root.sh
part scripts/fetch-arm64-builds.sh
part cargo test --locked "$@"
part scripts/check-wheels.sh
part scripts/check-readme-install.sh
part scripts/test-python.sh
part scripts/test-viewer.sh
