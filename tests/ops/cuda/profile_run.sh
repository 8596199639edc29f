#!/bin/bash
# The decode-step profile for the GPU machine (docs/cuda.md, "Profile of one decode step"): decode
# tokens/s of a bench config with CUDA graphs (the default) and without, then Nsight Compute's time and
# DRAM bytes of every kernel of a few eager steps (ncu --clock-control none; graphs off, so each kernel is
# seen as launched; the kernels are the graph's), summarised by profile_step.py. Carried with bench_model
# and its libraries (lib/) like run_engine.sh. Logs under $OUT, summary on stdout.
# Usage (device run, carry [".device/gpu"]): [EAGER=0] bash .device/gpu/profile_run.sh [config ...]
# (EAGER=0 leaves out the graphs-off decode run.)
DEV="$(cd "$(dirname "$0")" && pwd)"
export LD_LIBRARY_PATH=$DEV/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
step() {  # step LOG TIMEOUT CMD...: output into $OUT/LOG; rc and time on stdout
  local log=$1 limit=$2 t=$(date +%s%N); shift 2
  timeout "$limit" "$@" > "$OUT/$log" 2>&1
  echo "  -> $log: rc=$? in $(( ($(date +%s%N) - t) / 1000000 )) ms"
}
for c in ${@:-qwen35-4b}; do
  echo "== $c"
  step bench_$c.log 300 "$DEV/bench_model" --config "$DEV/configs/$c.json" --device cuda --prompt 512 --decode 128
  grep -E "bandwidth|weights|prefill|decode" "$OUT/bench_$c.log"
  if [ "${EAGER:-1}" = 1 ]; then
    step bench_${c}_eager.log 120 env KAPITSA_CUDA_GRAPHS=0 "$DEV/bench_model" --config "$DEV/configs/$c.json" --device cuda --prompt 512 --decode 128
    echo "  graphs off:"; grep -E "decode" "$OUT/bench_${c}_eager.log"
  fi
  # Steps: warm-up (2 tokens), prefill (1 token), 2 decode steps; the summary takes the last full one.
  step ncu_$c.log 260 env KAPITSA_CUDA_GRAPHS=0 "$NCU" --clock-control none --cache-control none --csv --page raw \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    "$DEV/bench_model" --config "$DEV/configs/$c.json" --device cuda --prompt 1 --decode 2
  python3 "$DEV/profile_step.py" "$OUT/ncu_$c.log" > "$OUT/profile_$c.txt" 2>&1
  head -45 "$OUT/profile_$c.txt"
done
(cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
