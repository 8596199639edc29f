#!/bin/bash
# GPU machine (DEV, REPO, OUT set): builds llama.cpp with CUDA (sm_90) from the source pack_llama_cuda.sh
# carried — llama-bench and llama-quantize, once per warm machine (~5 min on 16 cores) — and lays out
# /tmp/llb as gguf_bench_run.sh wants it. `llama_cuda_run.sh build` stops there; `llama_cuda_run.sh bench`
# runs llama-bench on every GGUF file in /tmp/kapitsa-bench: prefill of 512 tokens, and decode of 128
# tokens after 512 (the shape of bench_model --prompt 512 --decode 128). Logs under $OUT.
S=/tmp/llb/llama.cpp
if [ "$1" = build ] && [ ! -x $S/build/bin/llama-bench ]; then
  mkdir -p $S && tar -xJf $REPO/.device/llsrc/src.tar.xz -C $S && mv $S/kapitsa-tools /tmp/llb/tools && mv $S/kapitsa-stub /tmp/llb/stub
  t0=$(date +%s)
  cmake -S $S -B $S/build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DCMAKE_BUILD_TYPE=Release > $OUT/llama_build.log 2>&1 &&
    ninja -C $S/build llama-bench llama-quantize >> $OUT/llama_build.log 2>&1
  echo "llama.cpp build rc=$? in $(( $(date +%s)-t0 ))s"; tail -2 $OUT/llama_build.log
fi
if [ "$1" = bench ]; then
  for f in /tmp/kapitsa-bench/*.gguf; do
    for args in "-p 512 -n 0" "-p 0 -n 128 -d 512"; do
      $S/build/bin/llama-bench -m $f -ngl 99 $args -r 3 -o md 2>>$OUT/llama_bench.err | tee -a $OUT/llama_bench.md
    done
  done
fi
