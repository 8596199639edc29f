#!/usr/bin/env bash
# The sanitizer pass (the second half of scripts/test.sh): a clang build with AddressSanitizer,
# UndefinedBehaviorSanitizer and LeakSanitizer (preset "sanitize", build/sanitize, no CUDA, no
# benchmarks, no kapitsa executable) runs the tests of the libraries: every folder not in
# KAPITSA_SANITIZE_SKIP (tests/CMakeLists.txt; today all but models) except the tests that run the
# executable (tests/cli, *_cli.cpp, the agents, the npm SDK tests, the chat page's browser tests, the
# install test) — and each libFuzzer target in tests/fuzz for a fixed number of inputs from a fixed
# seed (tests/fuzz/CMakeLists.txt). Any sanitizer report fails the test that caused it. Needs clang and
# libclang-rt-14-dev (scripts/install-test-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset sanitize >/dev/null
cmake --build --preset sanitize
# halt_on_error: the first report ends the test with a failure; leaks are checked at every test's exit.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The text tests' random Jinja templates: 2000 here instead of 20000 (fuzz_jinja covers this ground).
export KAPITSA_FUZZ_ITERS=${KAPITSA_FUZZ_ITERS:-2000}
# Left out besides: the tests of sampling distributions (thousands of samples: statistics, which the
# release pass checks, minutes each under ASan). Long samples elsewhere shrink under ASan
# (kUnderAddressSanitizer in tests/test_util.h).
ctest --preset sanitize -j "$(nproc)" --timeout 900 -LE "cuda" -E "Ha(s|ve)ThePlainDistribution|TopPOverLargeVocabularySortsPastTheHead"
