#!/usr/bin/env bash
# The project's one test command (README, .ci/run): installs what is missing, builds everything, fails on any
# compiler warning in our own sources, runs the Swift test suites, then checks the built pipelinectl binary
# against the shared vectors.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install.sh

echo "== build"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! swift build --build-tests >"$log" 2>&1; then
    cat "$log"
    echo "build failed"
    exit 1
fi
tail -1 "$log"
if grep -E "^$PWD/(Sources|Tests)/.*: warning:" "$log"; then
    echo "our sources must build warning-free"
    exit 1
fi

echo "== swift test"
swift test --skip-build

echo "== pipelinectl verify contract"
python3 scripts/check-verify-contract.py .build/debug/pipelinectl
