#!/bin/bash
# GPU machine (after device_setup.sh; DEV, REPO, OUT set): a random Qwen3.5-4B-shaped checkpoint
# (bench_model --config, which also measures it in bf16), converted by llama.cpp's converter and
# llama-quantize (carried by pack_gguf_bench.sh) to QUANTS (default "Q4_K_M Q8_0"), then bench_model on
# each file on cuda — with the int8-activation GEMV and, for comparison, without (KAPITSA_CUDA_GGML_INT8=0).
# INT8S="1" skips the comparison without the int8 GEMV. PROFILE=Q4_K_M adds an Nsight Compute profile of one eager decode step of that file.
L=$REPO/.device/llama; [ -f $L/llb.tar.xz ] && mkdir -p /tmp/llb && tar -xJf $L/llb.tar.xz -C /tmp/llb  # else llama_cuda_run.sh made it
export LD_LIBRARY_PATH=/tmp/llb/llama.cpp/build/bin:$LD_LIBRARY_PATH
python3 -c "import yaml" 2>/dev/null || export PYTHONPATH=/tmp/llb/stub
t0=$(date +%s)
cd $DEV
./bench_model --config configs/qwen35-4b.json --device cuda --prompt 512 --decode 128 > $OUT/bench_bf16.log 2>&1
echo "bf16 rc=$? at $(( $(date +%s)-t0 ))s"; tail -2 $OUT/bench_bf16.log
M=/tmp/kapitsa-bench/qwen35-4b
python3 -c "import lzma, sys; open(sys.argv[2], 'wb').write(lzma.decompress(open(sys.argv[1], 'rb').read()))" \
  $REPO/tests/text/data/qwen3/tokenizer.json.xz $M/tokenizer.json
cp $REPO/tests/text/data/qwen3/tokenizer_config.json $M/
LLAMA_CPP_DIR=/tmp/llb/llama.cpp PYTHON=python3 JOBS=$(nproc) QUANTS="${QUANTS:=Q4_K_M Q8_0}" \
  bash /tmp/llb/tools/gguf-convert.sh $M > $OUT/convert.log 2>&1
echo "convert rc=$? at $(( $(date +%s)-t0 ))s"; grep -E "MiB, arch" $OUT/convert.log
for f in $QUANTS; do
  for int8 in ${INT8S:-1 0}; do
    KAPITSA_CUDA_GGML_INT8=$int8 ./bench_model --model $M-$f.gguf --device cuda --prompt 512 --decode 128 > $OUT/bench_$f.$int8.log 2>&1
    echo "$f int8=$int8 rc=$? at $(( $(date +%s)-t0 ))s"; tail -2 $OUT/bench_$f.$int8.log
  done
done
if [ -n "${PROFILE:-}" ]; then
  KAPITSA_CUDA_GRAPHS=0 timeout 300 ncu --clock-control none --cache-control none --csv --page raw \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    ./bench_model --model $M-$PROFILE.gguf --device cuda --prompt 1 --decode 2 > $OUT/ncu.csv 2> $OUT/ncu.err
  STEP_MARKER=dequantize_ggml_kernel python3 profile_step.py $OUT/ncu.csv > $OUT/profile.txt; head -30 $OUT/profile.txt
fi
