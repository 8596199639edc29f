#!/bin/bash
# The prefill call for the GPU machine (docs/cuda.md, sessions 22 and 24): the state-scan and MoE op tests on
# cuda, compute-sanitizer memcheck of them, the cuda model tests, then for each bench config a 512-token
# prefill (`bench_model --prompt 512 --decode 32`) and the kernel times of a prefill pair (ncu, summed by
# prefill_kernels.py).
# Logs in $OUT/logs.tar.xz (a call returns at most 8 files), summary on stdout.
# Bundle: BINARIES="test_ops test_models bench_model kapitsa" bash tests/ops/cuda/pack_device_bundle.sh
# Call (carry [".device/gpu"]): bash .device/gpu/prefill_run.sh [config ...]   (default: qwen35-4b
# nemotron3-nano-8experts)
DEV="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$DEV/../.." && pwd)"
tar -xJf "$DEV/bin.tar.xz" -C "$DEV"
export DEV REPO BUILT_IN=/work/main
source "$DEV/device_setup.sh" > /tmp/setup.log 2>&1
L=/tmp/logs && mkdir -p $L && cp /tmp/setup.log $L/
cd "$BUILT_IN"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
step() {  # step LOG LIMIT CMD...: output into $L/LOG, its tail and rc on stdout
  local log=$1 limit=$2 t=$SECONDS; shift 2
  timeout "$limit" "$@" > "$L/$log" 2>&1
  echo "[$log: rc=$? in $((SECONDS - t)) s]"; grep -E "PASSED|FAILED|ERROR SUMMARY|prefill|decode " "$L/$log" | head -12
}
OPS='*GatedDelta*/cuda:*Varlen*/cuda:*Ssd*/cuda:*Moe*/cuda:*Matmul*/cuda'
step ops.log 200 "$DEV/test_ops" --gtest_filter="$OPS"
step memcheck.log 200 "$CS" --tool memcheck "$DEV/test_ops" \
  --gtest_filter='*GatedDelta*/cuda:*Ssd*/cuda:*MoeRows*/cuda'
step models.log 200 "$DEV/test_models" --gtest_filter='*Cuda*:*cuda*'
for c in ${@:-qwen35-4b nemotron3-nano-8experts}; do
  step bench_$c.log 200 "$DEV/bench_model" --config "$DEV/configs/$c.json" --device cuda --prompt 512 --decode 32
  step ncu_$c.csv 200 env KAPITSA_CUDA_GRAPHS=0 "$NCU" --clock-control none --cache-control none --csv --page raw \
    --metrics gpu__time_duration.sum "$DEV/bench_model" --config "$DEV/configs/$c.json" --device cuda --prompt 512 --decode 0
  python3 "$DEV/prefill_kernels.py" "$L/ncu_$c.csv" 2>/dev/null | head -14
done
(cd /tmp && tar -cJf "$OUT/logs.tar.xz" logs)
