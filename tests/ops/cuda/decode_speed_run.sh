#!/bin/bash
# One GPU-machine call for decode-speed work (docs/cuda.md, "Measured run … session 10"): the CUDA op
# tests, the engine-on-cuda model tests (graph decode = eager included), memcheck of the fused kernels,
# then bench_model decode on the 4B and 0.8B shapes, everything on and with one change turned off at a
# time (environment switches: VARIANTS below), optionally Nsight Compute over one decode step
# (PROFILE=1). Carried with tests/models/device_setup.sh, its binaries (stripped), lib/ and configs/ as
# .device/gpu/bin.tar.xz.
# BATCHES="8 16": each bench config is also decoded by that many sequences in lockstep (bench_model --batch,
# the model alone) and through the engine (bench_runtime --concurrency 1 BATCHES; sampling included);
# PROFILE_BATCH=16: the profiled step is a decode step of that many sequences; PROFILE_PROMPT=512: the
# profiled step is the prefill of that many tokens (the step before the one decode step).
# QUANT_BITS="4 8": each bench config is also quantized (kapitsa quantize, MLX affine) and benched per
# variant; PROFILE_MODEL=DIR: the profiled model (with STEP_MARKER=dequantize_affine when quantized); MODELS=0: no model tests; BENCH_OPS=1: bench_ops_cuda per variant; MEMCHECK_FILTER: the memcheck's gtest filter.
# Usage (device run, carry [".device/gpu"]):
#   python3 -c "import tarfile; tarfile.open('.device/gpu/bin.tar.xz').extractall('.device/gpu')" &&
#   REPO=$PWD [TESTS=0] [MEMCHECK=0] [PROFILE=1] [BUILD_SUBDIR=build/release] bash .device/gpu/decode_speed_run.sh /work/wt/cuda
BUILT_IN=${1:?the worktree the binaries were built in}
DEV="$(cd "$(dirname "$0")" && pwd)"
REPO="${REPO:-$PWD}"
: "${BUILD_SUBDIR:=build/device}"  # where the test binaries look for kapitsa (KAPITSA_BIN)
source "$DEV/device_setup.sh"  # links, fixtures, step/summ
cd "$BUILT_IN"
if [ "${TESTS:-1}" = 1 ]; then
  echo "== test_ops_cuda + every op on cuda"
  step ops_cuda.log 60 "$DEV/test_ops_cuda"; summ $OUT/ops_cuda.log
  step ops.log 180 "$DEV/test_ops" --gtest_filter='*/cuda:Backends.*'; summ $OUT/ops.log
  grep -B3 -A12 "Failure" $OUT/ops.log | head -60
  if [ "${MEMCHECK:-1}" = 1 ]; then
    echo "== memcheck of the fused GDN op and the GEMV/norm kernels under PDL"
    step memcheck.log 180 compute-sanitizer --tool memcheck --leak-check no "$DEV/test_ops" --gtest_filter="${MEMCHECK_FILTER:-*GdnCore*/cuda:*AttentionPrep*/cuda:*Matmul*/cuda:*Norm*/cuda}"
    grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) \]" $OUT/memcheck.log | tail -3
  fi
  if [ "${MODELS:-1}" = 1 ]; then
    echo "== models on cuda vs cpu (graph decode = eager included)"
    step models.log 300 "$DEV/test_models" --gtest_filter='*CudaFixture*:Device.*:*CudaAffine*'; summ $OUT/models.log 60
    grep -B2 -A10 "Failure" $OUT/models.log | head -60
  fi
fi
# Variants: NAME=ENV,ENV… (defaults: all on; pdl0 = without programmatic dependent launch; pair0 = the
# one-token GEMV with one row a warp for short rows too).
VARIANTS=${VARIANTS:-on=X=1 pdl0=KAPITSA_CUDA_PDL=0 pair0=KAPITSA_GEMV_PAIR=0}
if [ "${BENCH_OPS:-0}" = 1 ]; then
  for v in $VARIANTS; do
    name=${v%%=*}; vars=${v#*=}
    step bench_ops_$name.log 240 env ${vars//,/ } "$DEV/bench_ops_cuda"
    echo "  bench_ops_cuda $name ($vars):"; grep -E "affine|bf16 T=1 " "$OUT/bench_ops_$name.log"
  done
fi
for c in ${BENCH_CONFIGS:-qwen35-4b qwen35-0.8b}; do
  for v in $VARIANTS; do
    name=${v%%=*}; vars=${v#*=}
    step bench_${c}_$name.log 240 env ${vars//,/ } "$DEV/bench_model" --config "$DEV/configs/$c.json" --device cuda --prompt 512 --decode 128
    echo "  $c $name ($vars):"; grep -E "bandwidth|weights|prefill|decode" "$OUT/bench_${c}_$name.log"
    for b in ${BATCHES:-}; do
      step bench_${c}_${name}_b$b.log 240 env ${vars//,/ } "$DEV/bench_model" --config "$DEV/configs/$c.json" --device cuda --prompt 16 --decode 64 --batch "$b"
      grep -E "batch +$b" "$OUT/bench_${c}_${name}_b$b.log"
    done
  done
  if [ -n "${BATCHES:-}" ]; then
    step runtime_$c.log 300 "$DEV/bench_runtime" --config "$DEV/configs/$c.json" --device cuda --concurrency 1 $BATCHES --turn1 0 --decode 64
    echo "  $c through the engine:"; tail -n +2 "$OUT/runtime_$c.log"
  fi
  for bits in ${QUANT_BITS:-}; do
    q=/tmp/kapitsa-bench/$c-q$bits
    [ -d "$q" ] || step quantize_${c}_$bits.log 300 "$DEV/kapitsa" quantize "/tmp/kapitsa-bench/$c" "$q" --bits "$bits"
    for v in $VARIANTS; do
      name=${v%%=*}; vars=${v#*=}
      step bench_${c}_q${bits}_$name.log 240 env ${vars//,/ } "$DEV/bench_model" --model "$q" --device cuda --prompt 512 --decode 128
      echo "  $c $bits-bit $name ($vars):"; grep -E "weights|prefill|decode" "$OUT/bench_${c}_q${bits}_$name.log"
    done
  done
done
if [ "${PROFILE:-0}" = 1 ]; then
  profiled=(--config "$DEV/configs/qwen35-4b.json")
  [ -n "${PROFILE_MODEL:-}" ] && profiled=(--model "$PROFILE_MODEL")
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  step ncu_4b.log 420 env KAPITSA_CUDA_GRAPHS=0 "$NCU" --clock-control none --cache-control none --csv --page raw \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    "$DEV/bench_model" "${profiled[@]}" --device cuda --prompt "${PROFILE_PROMPT:-1}" \
    --decode "$([ -n "${PROFILE_BATCH:-}${PROFILE_PROMPT:-}" ] && echo 1 || echo 2)" --batch "${PROFILE_BATCH:-1}"
  python3 "$DEV/profile_step.py" "$OUT/ncu_4b.log" > "$OUT/profile_4b.txt" 2>&1
  head -45 "$OUT/profile_4b.txt"
fi
(cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
