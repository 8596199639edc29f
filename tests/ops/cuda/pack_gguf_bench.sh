#!/usr/bin/env bash
# Packs what the GPU machine needs to make GGUF files there (it cannot download them, and a 4B-shaped
# file is too large to carry): llama.cpp's converter (python) and llama-quantize with its libraries from
# a CPU build of llama.cpp here (../shared/tools/llama.cpp/build.sh; the native build of an AVX-512 VM
# ran on the GPU machine's Xeon), the converter's offline shim and a stand-in `yaml` module for a Python
# without one (the Qwen tokenizer travels in the tree: tests/text/data/qwen3). Writes .device/llama/
# (git-excluded): llb.tar.xz (~3.5 MB) and
# gguf_bench_run.sh. Carry [".device/gpu", ".device/llama"] with BINARIES="bench_model" in .device/gpu
# (with test_ops too the call passes the 64 MiB limit: docs/cuda.md, "GGUF files on the GPU").
# Usage: LLAMA_CPP_DIR=/tmp/llama.cpp-ref/llama.cpp bash tests/ops/cuda/pack_gguf_bench.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
L=${LLAMA_CPP_DIR:-/tmp/llama.cpp-ref/llama.cpp}
SHARED=${SHARED:-../shared}
[ -x "$L/build/bin/llama-quantize" ] || { echo "no llama-quantize in $L/build/bin (TARGETS=llama-quantize bash $SHARED/tools/llama.cpp/build.sh)" >&2; exit 1; }
stage=$(mktemp -d)
mkdir -p "$stage/llama.cpp/build/bin" "$stage/tools" "$stage/stub"
cp -r "$L/convert_hf_to_gguf.py" "$L/conversion" "$L/gguf-py" "$stage/llama.cpp/"
find "$stage" -name __pycache__ -prune -exec rm -rf {} +
for f in llama-quantize libllama.so.0 libllama-common.so.0 libllama-quantize-impl.so libggml-base.so.0 libggml-cpu.so.0 libggml.so.0; do
  [ -e "$L/build/bin/$f" ] && cp -L "$L/build/bin/$f" "$stage/llama.cpp/build/bin/"
done
cp -L /lib/x86_64-linux-gnu/libgomp.so.1 "$stage/llama.cpp/build/bin/"
cp -r "$SHARED/tools/llama.cpp/hfshim" "$SHARED/tools/llama.cpp/gguf-convert.sh" "$stage/tools/"
echo 'def safe_load(s): return {}' > "$stage/stub/yaml.py"  # the converter reads model cards with it
mkdir -p .device/llama
grep -qx ".device/" .git/info/exclude 2>/dev/null || { mkdir -p .git/info && echo ".device/" >> .git/info/exclude; }
(cd "$stage" && tar -cJf "$OLDPWD/.device/llama/llb.tar.xz" .)
cp tests/ops/cuda/gguf_bench_run.sh .device/llama/
rm -rf "$stage"
du -sh .device/llama
