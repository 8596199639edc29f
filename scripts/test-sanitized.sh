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
# The cpu kernels only for the levels this machine runs (x86-64; elsewhere all): the op tests of the
# others would skip here, and building them under ASan cost ~200 CPU-seconds each. The release pass
# builds every level.
host_cpu_levels() {
  [[ $(uname -m) == x86_64 ]] || return 0
  local flags
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  has() { for f; do [[ $flags == *" $f "* ]] || return 1; done; }
  local levels=baseline
  if has avx avx2 fma f16c bmi1 bmi2 movbe; then  # x86-64-v3 (as src/ops/cpu/dispatch.cpp asks CPUID)
    levels+=";avx2"
    if has avx_vnni; then levels+=";avxvnni"; fi
    if has avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni; then levels+=";avx512"; fi
  fi
  echo "$levels"
}
cmake --preset sanitize -DKAPITSA_CPU_LEVELS="$(host_cpu_levels)" >/dev/null
cmake --build --preset sanitize
# halt_on_error: the first report ends the test with a failure; leaks are checked at every test's exit.
# malloc_context_size: 8 frames of each allocation's and free's stack kept (30 by default: unwinding them
# on every malloc was ~13% of the text tests' time); a report's own stack stays whole.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=0:malloc_context_size=8}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The text tests' random Jinja templates: 2000 here instead of 20000 (fuzz_jinja covers this ground).
export KAPITSA_FUZZ_ITERS=${KAPITSA_FUZZ_ITERS:-2000}
# Left out besides: the tests of sampling distributions (thousands of samples: statistics, which the
# release pass checks, minutes each under ASan). Long samples elsewhere shrink under ASan
# (kUnderAddressSanitizer in tests/test_util.h).
ctest --preset sanitize -j "$(nproc)" --timeout 900 -LE "cuda" -E "Ha(s|ve)ThePlainDistribution|TopPOverLargeVocabularySortsPastTheHead"
