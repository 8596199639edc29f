#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, runs every test (ctest), the AArch64 op tests under
# qemu (scripts/test-aarch64.sh), then the sanitizer pass.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/install-test-deps.sh
bash scripts/build.sh
ctest --preset release -j "$(nproc)" --timeout 900
# The ARM NEON kernels: cross-compiled for AArch64, their op tests under qemu-aarch64 (build/aarch64).
bash scripts/test-aarch64.sh
# The sanitizer pass: the unit, runtime, server and cli tests under ASan/UBSan/LSan, and the fuzz targets.
bash scripts/test-sanitized.sh
