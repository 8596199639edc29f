#!/bin/bash
# One GPU-machine call for the changes written where no GPU came (docs/cuda.md, sessions 38-39), each
# behind a switch until this has run: the op tests, memcheck and the cuda model tests with
# KAPITSA_SSD_SCAN_VEC=1 (the float4 Mamba-2 decode scan) and KAPITSA_ATTENTION_TILED=1 (the tiled prompt
# attention), plus the ops whose kernels moved under PDL or into one launch (MoE, gated group norm,
# embedding, split/concat columns) as they are. PART=x1: instead, the cuda model and engine tests with
# KAPITSA_PREFILL_X_PARTS=1 (x as one bf16 part in prompts' GEMMs; which tests fail, and by how much).
# Speed: decode_speed_run.sh with VARIANTS naming the same switches (docs/cuda.md shows the calls).
# Usage (device run, carry [".device"]; bundle BINARIES="test_ops test_models test_runtime kapitsa bench_spec bench_model"):
#   tar -xJf .device/gpu/bin.tar.xz -C .device/gpu && BUILT_IN=/work/main bash .device/gpu/switches_run.sh
DEV="$(cd "$(dirname "$0")" && pwd)"
REPO=${REPO:-$PWD}
BUILT_IN=${BUILT_IN:?the worktree the binaries were built in}
BUILD_SUBDIR=${BUILD_SUBDIR:-build/release}
source "$DEV/device_setup.sh"
cd "$BUILT_IN"
if [ "${PART:-switches}" = x1 ]; then
  step models_x1.log 240 env KAPITSA_PREFILL_X_PARTS=1 "$DEV/test_models" --gtest_filter='*CudaFixture*:Device.*'
  summ $OUT/models_x1.log 12; grep -E "Failure|relative_error|Which is|greedy|row|^\[  FAILED" $OUT/models_x1.log | head -60
  step runtime_x1.log 300 env KAPITSA_PREFILL_X_PARTS=1 "$DEV/test_runtime" --gtest_filter='*Cuda*'
  summ $OUT/runtime_x1.log 12; grep -E "Failure|Which is|^\[  FAILED" $OUT/runtime_x1.log | head -30
else
  ops='*Ssd*/cuda:*Varlen*/cuda:*Moe*/cuda:*RmsNormGroup*/cuda:*Embedding*/cuda:*Convert*/cuda:*SplitConcat*/cuda'
  step ops.log 120 "$DEV/test_ops" --gtest_filter="$ops:*Attention*/cuda"
  summ $OUT/ops.log 8; grep -B3 -A8 "Failure" $OUT/ops.log | head -20
  step ops_switches.log 120 env KAPITSA_SSD_SCAN_VEC=1 KAPITSA_ATTENTION_TILED=1 "$DEV/test_ops" \
    --gtest_filter='*Ssd*/cuda:*Varlen*/cuda:*Attention*/cuda'
  summ $OUT/ops_switches.log 8; grep -B3 -A8 "Failure" $OUT/ops_switches.log | head -30
  step memcheck.log 240 env KAPITSA_SSD_SCAN_VEC=1 KAPITSA_ATTENTION_TILED=1 compute-sanitizer --tool memcheck \
    --leak-check no "$DEV/test_ops" --gtest_filter='*Ssd*/cuda:*AttentionPagedVarlen*/cuda:*Moe*/cuda:*RmsNormGroup*/cuda:*SplitConcat*/cuda'
  grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) \]" $OUT/memcheck.log | tail -3
  if [ "${MODELS_DEFAULT:-1}" = 1 ]; then  # MODELS_DEFAULT=0: only with the switches (a short call)
    step models.log 300 "$DEV/test_models" --gtest_filter='*CudaFixture*:Device.*:*CudaAffine*'
    summ $OUT/models.log 12; grep -B3 -A8 "Failure" $OUT/models.log | head -30
  fi
  step models_switches.log 300 env KAPITSA_SSD_SCAN_VEC=1 KAPITSA_ATTENTION_TILED=1 "$DEV/test_models" \
    --gtest_filter='*CudaFixture*:Device.*:*CudaAffine*'
  summ $OUT/models_switches.log 12; grep -B3 -A8 "Failure" $OUT/models_switches.log | head -30
fi
(cd "$OUT" && tar -czf logs_${PART:-switches}.tgz *.log && rm -f *.log)
