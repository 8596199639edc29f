#!/bin/bash
# The CUDA backend's GPU-machine run (docs/cuda.md): copied into /work/main/.device with the carried
# binaries; CUDA-specific tests, every shared op test on cuda, compute-sanitizer memcheck and racecheck,
# bench. Full logs under $OUT; a summary on stdout.
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
ldd ./test_ops | grep "not found"
# step LOG CMD...: CMD's output into $OUT/LOG, its exit code and time on stdout.
step() {
  local log=$1 t=$(date +%s%N); shift
  "$@" > "$OUT/$log" 2>&1
  echo "  -> $log: rc=$? in $(( ($(date +%s%N) - t) / 1000000 )) ms"
}
summ() { grep -E "^\[  (PASSED|FAILED|SKIPPED) +\]|^\[==========\]|cuda: " "$1" | head -${2:-40}; }
echo "== test_ops_cuda"; step test_ops_cuda.log ./test_ops_cuda; summ $OUT/test_ops_cuda.log
echo "== test_ops (every op on cuda vs ref, plus registry and varlen errors)"
step test_ops.log ./test_ops --gtest_filter='*/cuda:Backends.*:Varlen.*'; summ $OUT/test_ops.log 60
grep -E "OK \].*cuda" $OUT/test_ops.log | head -40
grep -B3 -A12 "Failure" $OUT/test_ops.log | head -120
echo "== memcheck"
step memcheck.log timeout 240 compute-sanitizer --tool memcheck --leak-check no ./test_ops --gtest_filter='*/cuda'
grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) \]" $OUT/memcheck.log | tail -5; grep -m5 -A8 "Invalid" $OUT/memcheck.log
echo "== racecheck"
step racecheck.log timeout 100 compute-sanitizer --tool racecheck ./test_ops --gtest_filter='*Attention*/cuda:*Norm*/cuda:*Varlen*/cuda'
grep -E "RACECHECK SUMMARY|^\[  (PASSED|FAILED) \]" $OUT/racecheck.log | tail -4
echo "== bench"
step bench.log timeout 90 ./bench_ops_cuda; tail -25 $OUT/bench.log
