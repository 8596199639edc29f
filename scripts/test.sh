#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, runs every test (ctest), the AArch64 op tests under
# qemu (scripts/test-aarch64.sh), then the sanitizer pass. Each phase prints its wall time (CI's budget is
# 45 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
phase() {
  local name=$1
  shift
  local start=$SECONDS
  "$@"
  echo "== test.sh: $name took $((SECONDS - start)) s (total $SECONDS s)"
}
phase "dependencies" bash -c 'bash scripts/install-deps.sh && bash scripts/install-test-deps.sh'
phase "release build" bash scripts/build.sh
phase "release tests" ctest --preset release -j "$(nproc)" --timeout 900
# The ARM NEON kernels: cross-compiled for AArch64, their op tests under qemu-aarch64 (build/aarch64).
phase "aarch64 build and tests" bash scripts/test-aarch64.sh
# The sanitizer pass: the unit, runtime, server and cli tests under ASan/UBSan/LSan, and the fuzz targets.
phase "sanitizer build and tests" bash scripts/test-sanitized.sh
