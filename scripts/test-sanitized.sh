#!/usr/bin/env bash
# The sanitizer pass (part of scripts/test.sh): a clang build with AddressSanitizer, UndefinedBehavior-
# Sanitizer and LeakSanitizer (preset "sanitize", build/sanitize, no CUDA, no benchmarks) runs the tests
# of the folders not in KAPITSA_SANITIZE_SKIP (tests/CMakeLists.txt; today base, weights, text) —
# not the agents, the npm SDK tests or the install test — and each libFuzzer target in tests/fuzz for
# KAPITSA_FUZZ_SECONDS (default 20) over its seed corpus. Any sanitizer report
# fails the test that caused it. Needs clang and libclang-rt-14-dev (scripts/install-test-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset sanitize -DKAPITSA_FUZZ_SECONDS="${KAPITSA_FUZZ_SECONDS:-20}" >/dev/null
cmake --build --preset sanitize
# halt_on_error: the first report ends the test with a failure; leaks are checked at every test's exit.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --preset sanitize -j "$(nproc)" --timeout 900 -LE "agents|server_js|cuda" -E "^install_prefix$"
