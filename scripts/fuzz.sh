#!/usr/bin/env bash
# Runs the libFuzzer targets for longer than CI does, by hand: scripts/fuzz.sh [SECONDS] [TARGET...]
# (default 600 s each, every target). Builds the "sanitize" preset first. New inputs go to
# build/sanitize/fuzz/<target>/new; findings to build/sanitize/fuzz/<target>/crash-* (reproduce with
# build/sanitize/tests/fuzz/<target> FILE). Record long runs and findings in docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
cmake --preset sanitize >/dev/null
cmake --build --preset sanitize
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
for t in "${targets[@]}"; do
  echo "== $t: $seconds s"
  tests/fuzz/run_fuzz.sh "build/sanitize/tests/fuzz/$t" tests/fuzz build/sanitize/fuzz "seconds=$seconds" 2>&1 | tail -4
done
