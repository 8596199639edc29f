#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, runs every test (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/install-test-deps.sh
bash scripts/build.sh
ctest --preset release -j "$(nproc)" --timeout 900
# The same tests under AddressSanitizer/UBSan/LeakSanitizer, and the fuzz targets (clang build).
bash scripts/test-sanitized.sh
