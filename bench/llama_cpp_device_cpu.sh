#!/bin/bash
# llama.cpp beside Kapitsa on the GPU machine's CPU (a 16-vCPU Intel Xeon with AMX; no GPU used), on one
# BF16 GGUF file of a random Qwen3.5-0.8B-shaped checkpoint: llama-bench and bench_model (AMX on and
# off), prefill 512 and decode 32, all threads. llama.cpp is built there from the source carried as
# .device/llama/src.tar.xz (`git archive` of ../shared/tools/llama.cpp's tree: build.sh fetches it;
# GPU backends, the server and its web UI left out), with GGML_NATIVE (its own AMX code included). Carried beside it: the qwen3
# tokenizer (.device/llama/tokenizer.json.xz, tokenizer_config.json) for the converter, and a bundle
# with bench_model (BINARIES="bench_model" bash tests/ops/cuda/pack_device_bundle.sh).
# Usage (device run, carry [".device"]): REPO=$PWD bash bench/llama_cpp_device_cpu.sh
set -u
REPO=${REPO:-$PWD}
DEV=$REPO/.device
L=/tmp/llama.cpp
mkdir -p $L && tar -xJf $DEV/llama/src.tar.xz -C $L
python3 -c "import tarfile; tarfile.open('$DEV/gpu/bin.tar.xz').extractall('$DEV/gpu')"
export LD_LIBRARY_PATH=$DEV/gpu/lib
lscpu | grep -E "Model name|^CPU\(s\)"
echo "== build llama-bench (CPU, GGML_NATIVE)"
t=$(date +%s)
cmake -S $L -B $L/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF > /tmp/llama-configure.log 2>&1 || tail -20 /tmp/llama-configure.log
ninja -C $L/build llama-bench > /tmp/llama-build.log 2>&1 || tail -30 /tmp/llama-build.log
echo "  built in $(( $(date +%s) - t )) s"
echo "== random checkpoint (bench_model synthesizes it)"
[ -d /tmp/kapitsa-bench/qwen35-0.8b ] || $DEV/gpu/bench_model --config $DEV/gpu/configs/qwen35-0.8b.json --device cpu --prompt 16 --decode 1 > /dev/null 2>&1
M=/tmp/kapitsa-bench/qwen35-0.8b
xz -dc $DEV/llama/tokenizer.json.xz > $M/tokenizer.json && cp $DEV/llama/tokenizer_config.json $M/
echo "== convert to BF16 GGUF (llama.cpp's converter)"
PYTHONPATH=$L/gguf-py python3 $L/convert_hf_to_gguf.py $M --no-mtp --outtype bf16 --outfile /tmp/q08-bf16.gguf > /tmp/convert.log 2>&1 ||
  tail -20 /tmp/convert.log
ls -la /tmp/q08-bf16.gguf
T=$(nproc)
for r in 1 2; do
  echo "== round $r: llama-bench -p 512 -n 32 -t $T"
  $L/build/bin/llama-bench -m /tmp/q08-bf16.gguf -p 512 -n 32 -t $T -r 2 2>&1 | grep -E "^\|"
  for amx in 1 0; do
    echo "  Kapitsa bench_model on the same file, KAPITSA_AMX=$amx:"
    KAPITSA_AMX=$amx $DEV/gpu/bench_model --model /tmp/q08-bf16.gguf --device cpu --prompt 512 --decode 32 2>&1 | grep -E "prefill|decode"
  done
done
