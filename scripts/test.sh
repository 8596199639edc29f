#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, runs every test (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/install-test-deps.sh
bash scripts/build.sh
ctest --preset release -j "$(nproc)" --timeout 900
# The sanitizer pass (scripts/test-sanitized.sh: ASan/UBSan/LSan tests and the fuzz targets) joins here
# once it has passed from a clean clone; until then run it by hand.
