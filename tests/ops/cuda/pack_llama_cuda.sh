#!/usr/bin/env bash
# Packs llama.cpp's source (the tree ../shared/tools/llama.cpp/build.sh fetched) for a CUDA build on the GPU
# machine, the peer that issue 14's figures stand beside, with its GGUF converter and the shared tools'
# offline shim: .device/llsrc/src.tar.xz (~3.9 MB: the CPU and CUDA backends only, no other backend, no
# web UI) and llama_cuda_run.sh, which builds llama-bench and llama-quantize there and lays out /tmp/llb
# as gguf_bench_run.sh wants it (so .device/llama, whose llama-quantize is a CPU build from here, is not
# needed). Carry [".device/gpu", ".device/llsrc"].
# Usage: LLAMA_CPP_DIR=/tmp/llama.cpp-ref/llama.cpp bash tests/ops/cuda/pack_llama_cuda.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
L=${LLAMA_CPP_DIR:-/tmp/llama.cpp-ref/llama.cpp}
SHARED=${SHARED:-../shared}
[ -f "$L/ggml/src/ggml-cuda/ggml-cuda.cu" ] || { echo "no llama.cpp source in $L (bash ../shared/tools/llama.cpp/build.sh)" >&2; exit 1; }
mkdir -p .device/llsrc
grep -qx ".device/" .git/info/exclude 2>/dev/null || { mkdir -p .git/info && echo ".device/" >> .git/info/exclude; }
skip=()
for b in cann hexagon hip metal musa opencl openvino sycl virtgpu vulkan webgpu zdnn zendnn et blas rpc; do
  skip+=(--exclude="ggml/src/ggml-$b")
done
stage=$(mktemp -d)
mkdir -p "$stage/kapitsa-tools" "$stage/kapitsa-stub"
cp -r "$SHARED/tools/llama.cpp/hfshim" "$SHARED/tools/llama.cpp/gguf-convert.sh" "$stage/kapitsa-tools/"
echo 'def safe_load(s): return {}' > "$stage/kapitsa-stub/yaml.py"  # the converter reads model cards with it
tar -C "$L" -cf "$stage/src.tar" "${skip[@]}" --exclude=tools/ui --exclude='*.png' --exclude='*.gguf' \
  --exclude=__pycache__ CMakeLists.txt CMakePresets.json cmake common ggml include src tools vendor licenses \
  LICENSE app convert_hf_to_gguf.py conversion gguf-py
tar -C "$stage" -rf "$stage/src.tar" kapitsa-tools kapitsa-stub
xz -T0 -c "$stage/src.tar" > .device/llsrc/src.tar.xz
rm -rf "$stage"
cp tests/ops/cuda/llama_cuda_run.sh .device/llsrc/
du -sh .device/llsrc
