#!/bin/bash
# One GPU-machine call for the cpu's AMX kernels (docs/decisions.md "AMX"): that machine's Xeon has AMX,
# this one and CI's do not. Runs the AMX and matmul op tests on every cpu level (AmxInt8.*: the
# AMX-INT8 GEMM of GGUF blocks on the CPU's tiles, bit-equal to the AVX-512 panels and to its emulation),
# the cpu model tests (fixtures against transformers, bf16 prefill through AMX), `kapitsa doctor`'s AMX
# line, then bench_ops' matmuls (bf16; Q8_0, Q4_K, Q6_K, Q4_0 prefill at T=512) and bench_model's 0.8B
# prefill with AMX on and off (KAPITSA_AMX=0).
# Carried with the bundle of tests/ops/cuda/pack_device_bundle.sh (bench_ops, test_ops, test_models,
# bench_model, kapitsa). Usage (device run, carry [".device"]):
#   python3 -c "import tarfile; tarfile.open('.device/gpu/bin.tar.xz').extractall('.device/gpu')" &&
#   REPO=$PWD bash .device/gpu/amx_device_run.sh /work/main
BUILT_IN=${1:?the worktree the binaries were built in}
DEV="$(cd "$(dirname "$0")" && pwd)"
REPO="${REPO:-$PWD}"
source "$DEV/device_setup.sh"
cd "$BUILT_IN"
lscpu | grep -E "Model name|^CPU\(s\)"; lscpu | grep -o "amx[a-z_0-9]*" | sort -u | tr '\n' ' '; echo
"$DEV/kapitsa" doctor 2>&1 | grep -E "Kernels|AMX"
echo "== op tests: AMX, matmul (dense and block weights) on every cpu level"
step amx_ops.log 300 "$DEV/test_ops" --gtest_filter='AmxBf16.*:AmxInt8.*:*Matmul*:*Moe*:*DenseRows*:*Ggml*:-*/cuda'; summ $OUT/amx_ops.log
grep -E "^\[ +(OK|SKIPPED|FAILED) +\] AmxInt8|Skipped|AMX-INT8" $OUT/amx_ops.log | head
grep -B3 -A12 "Failure" $OUT/amx_ops.log | head -60
if [ "${MODELS:-1}" = 1 ]; then
  echo "== model tests on the cpu (prefill matmuls through AMX)"
  step amx_models.log 400 "$DEV/test_models" --gtest_filter='-*Cuda*:*Device*'; summ $OUT/amx_models.log
  grep -B3 -A12 "Failure" $OUT/amx_models.log | head -60
fi
for amx in 1 0; do
  echo "== KAPITSA_AMX=$amx"
  step bench_ops_amx$amx.log 300 env KAPITSA_AMX=$amx "$DEV/bench_ops" --benchmark_filter="${BENCH_FILTER:-BM_Matmul/T:(64|512)/|BM_MatmulGgml/T:512/N:3584/K:1024/type:(8|12|14|2)/packed:0}"
  grep "^BM_" $OUT/bench_ops_amx$amx.log
  for c in ${BENCH_CONFIGS:-qwen35-0.8b}; do
    step bench_model_${c}_amx$amx.log 400 env KAPITSA_AMX=$amx "$DEV/bench_model" --config "$DEV/configs/$c.json" --device cpu --prompt 512 --decode 16
    grep -E "threads|prefill|decode" $OUT/bench_model_${c}_amx$amx.log
  done
done
