#!/usr/bin/env bash
# The AArch64 (ARM NEON) pass of scripts/test.sh: cross-compiles the op libraries and tests/ops with
# Debian's g++-aarch64-linux-gnu (cmake/aarch64-linux-gnu.cmake, KAPITSA_OPS_ONLY: no arm64 packages,
# linked statically) into build/aarch64, and runs test_ops under qemu-aarch64 twice:
#   -cpu max         the dotprod and i8mm levels (each op test on each) and the ref-only tests;
#   -cpu cortex-a53  an ARMv8.0 CPU without the dot product: the dispatcher must pick baseline (the op tests
#                    on the cpu backend: the baseline level's run, the only one), and any v8.1+ instruction
#                    reaching the baseline path is an illegal instruction here.
#   -cpu neoverse-n1 dot product without i8mm: CpuLevels.* only (the dispatcher picks dotprod);
# and checks the linked test_ops for such instructions outside the dotprod and i8mm kernels
# (tests/ops/level_isolation_aarch64.sh). Installs the cross compiler and qemu-user when missing
# (apt-get; sudo when not root). Extra arguments go to test_ops (e.g. --gtest_filter=Affine*) in place of
# each run's filter.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(g++-aarch64-linux-gnu binutils-aarch64-linux-gnu qemu-user googletest libfmt-dev nlohmann-json3-dev)
bash scripts/apt-install.sh "${packages[@]}"

start=$(date +%s)
# -O2: the kernels' intrinsics need no more, and the build is most of this pass's time on 2 cores.
cmake -S . -B build/aarch64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DKAPITSA_OPS_ONLY=ON \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" >/dev/null
cmake --build build/aarch64 --target test_ops
built=$(date +%s)
bash tests/ops/level_isolation_aarch64.sh build/aarch64/tests/test_ops

# One GoogleTest shard per core (at most 8) per run: the ref computations in the tests are single-threaded.
run_shards() {  # cpu model, expected best level, extra args
  local cpu=$1 level=$2
  shift 2
  local shards=${KAPITSA_AARCH64_SHARDS:-$(($(nproc) < 8 ? $(nproc) : 8))} pids=() rc=0
  for ((i = 0; i < shards; ++i)); do
    GTEST_DEATH_TEST_STYLE=fast GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i KAPITSA_TEST_CPU_LEVEL=$level \
      qemu-aarch64 -cpu "$cpu" build/aarch64/tests/test_ops --gtest_brief=1 "$@" >"build/aarch64/tests/test_ops.$cpu.$i.log" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < shards; ++i)); do
    if ! wait "${pids[$i]}"; then
      rc=1
      echo "kapitsa: test_ops under qemu-aarch64 -cpu $cpu, shard $i of $shards failed:"
      tail -n 60 "build/aarch64/tests/test_ops.$cpu.$i.log"
    fi
  done
  grep -h "tests\? ran\|PASSED\|SKIPPED\|FAILED" build/aarch64/tests/test_ops."$cpu".*.log | sed "s/^/  $cpu: /"
  return $rc
}
# Each test runs once: the baseline level under cortex-a53 only, the ref-only tests under max only (the same
# code on either CPU), 2 minutes less than both runs running everything.
max_args=(--gtest_filter='-*/cpu_baseline') a53_args=(--gtest_filter='*/cpu:CpuLevels.*')
[ $# -gt 0 ] && max_args=("$@") a53_args=("$@")
rc=0
run_shards max i8mm "${max_args[@]}" || rc=1
# A CPU with the dot product and no i8mm (Neoverse N1, Graviton 2): the dispatcher must stop at dotprod.
KAPITSA_TEST_CPU_LEVEL=dotprod qemu-aarch64 -cpu neoverse-n1 build/aarch64/tests/test_ops --gtest_brief=1 \
  --gtest_filter='CpuLevels.*' >build/aarch64/tests/test_ops.neoverse-n1.log 2>&1 ||
  { rc=1; echo "kapitsa: test_ops CpuLevels.* under qemu-aarch64 -cpu neoverse-n1 failed:"; tail -n 30 build/aarch64/tests/test_ops.neoverse-n1.log; }
run_shards cortex-a53 baseline "${a53_args[@]}" || rc=1
echo "kapitsa: aarch64 pass: build $((built - start)) s, qemu runs $(($(date +%s) - built)) s"
exit $rc
