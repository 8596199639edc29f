#!/bin/bash
# The engine-on-GPU run for the GPU machine (docs/cuda.md, "Running on the GPU machine"): copied into
# /work/main/.device with device_setup.sh and the carried binaries (built here, portable flags). Then: fixtures unpacked, CUDA op tests, the engine on cuda vs cpu (models and
# runtime tests), the CLI, whole-model tokens/s on cuda and cpu (bench_model: demo, Qwen3.5-0.8B, -4B and
# Nemotron shapes, decode with CUDA graphs and without) and the engine's aggregate decode at 1 and 16
# sequences (bench_runtime, 4B shape).
# Logs under $OUT, summary on stdout.
# Usage (device run, carry [".device"]): bash .device/run_engine.sh /work/wt/cuda
# or from a subfolder (carry [".device/cuda"]): REPO=$PWD bash .device/cuda/run_engine.sh /work/wt/cuda
BUILT_IN=${1:?the worktree the binaries were built in}
DEV="$(cd "$(dirname "$0")" && pwd)"
REPO="${REPO:-$(dirname "$DEV")}"  # the checkout; set it when DEV is not its .device folder
source "$DEV/device_setup.sh"  # links, fixtures, step/summ
cd "$BUILT_IN"
echo "== test_ops_cuda + every op on cuda"
step ops_cuda.log 60 "$DEV/test_ops_cuda"; summ $OUT/ops_cuda.log
step ops.log 120 "$DEV/test_ops" --gtest_filter='*/cuda:Backends.*'; summ $OUT/ops.log
echo "== memcheck of the MoE and matmul kernels"
step memcheck.log 180 compute-sanitizer --tool memcheck --leak-check no "$DEV/test_ops" --gtest_filter='*Moe*/cuda:*Matmul*/cuda'
grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) \]" $OUT/memcheck.log | tail -3
if [ -x "$DEV/bench_ops_cuda" ]; then
  step bench_ops.log 90 "$DEV/bench_ops_cuda"; grep -iE "matmul" $OUT/bench_ops.log | head -8
fi
echo "== memcheck of a decode step captured and replayed as a CUDA graph"
step memcheck_graph.log 240 compute-sanitizer --tool memcheck --leak-check no "$DEV/test_models" --gtest_filter='Qwen/*GraphDecodeEqualsEager*:Nemotron/*GraphDecodeEqualsEager*'
grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) \]" $OUT/memcheck_graph.log | tail -3
echo "== models on cuda vs cpu"
step models.log 300 "$DEV/test_models" --gtest_filter='*CudaFixture*:Device*'; summ $OUT/models.log 60
grep -B2 -A10 "Failure" $OUT/models.log | head -80
echo "== engine on cuda vs cpu"
step runtime.log 300 "$DEV/test_runtime" --gtest_filter='*EngineOnCuda*:EngineCuda*'; summ $OUT/runtime.log 40
grep -B2 -A10 "Failure" $OUT/runtime.log | head -60
echo "== kapitsa run --device cuda (demo)"
step run.log 60 "$BUILT_IN/$BUILD_SUBDIR/kapitsa" run --device cuda --temperature 0 --max-tokens 24 "The capital of France is"
tail -5 $OUT/run.log
echo "== bench_model"
for d in cuda cpu; do
  step bench_demo_$d.log 120 "$DEV/bench_model" --model "$REPO/models/demo/target" --device $d --prompt 256 --decode 256
  grep -E "device|bandwidth|weights|prefill|decode" $OUT/bench_demo_$d.log
done
# Configs newer than the checkout the run was sent from travel in .device/configs.
CONFIGS="$REPO/bench/configs"; [ -f "$DEV/configs/qwen35-4b.json" ] && CONFIGS="$DEV/configs"
# Each config twice: decode steps as CUDA graphs (the default), then op by op (KAPITSA_CUDA_GRAPHS=0).
# BENCH_CONFIGS picks configs (the 4B one spends about 4 minutes writing its random checkpoint).
for c in ${BENCH_CONFIGS:-qwen35-0.8b nemotron3-nano-scaled qwen35-4b}; do
  step bench_${c}_cuda.log 300 "$DEV/bench_model" --config "$CONFIGS/$c.json" --device cuda --prompt 512 --decode 128
  grep -E "model|bandwidth|weights|prefill|decode" $OUT/bench_${c}_cuda.log
  step bench_${c}_cuda_eager.log 120 env KAPITSA_CUDA_GRAPHS=0 "$DEV/bench_model" --config "$CONFIGS/$c.json" --device cuda --prompt 512 --decode 128
  echo "  graphs off:"; grep -E "decode" $OUT/bench_${c}_cuda_eager.log
done
[[ " ${BENCH_CONFIGS:-qwen35-4b} " == *" qwen35-4b "* ]] && {
echo "== aggregate decode, 1 and 16 sequences (engine on cuda)"
step runtime_4b_cuda.log 240 "$DEV/bench_runtime" --config "$CONFIGS/qwen35-4b.json" --device cuda --prompt 32 --decode 64 \
  --concurrency 1 16 --turn1 0
grep -vE "^writing" $OUT/runtime_4b_cuda.log | tail -4
}
# At most 8 files come back from $OUT: the logs travel as one archive.
(cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
