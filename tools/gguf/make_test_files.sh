#!/usr/bin/env bash
# make_test_files.sh — regenerate the GGUF test files in tests/fixtures/gguf/ with llama.cpp's own tools
# (convert_hf_to_gguf.py, llama-quantize) and their reference values with gguf-py's numpy
# dequantization — never with Kapitsa's code. Needs llama.cpp's source and build (see
# ../shared/tools/llama.cpp/README.md: build.sh) and Debian's python3-torch python3-numpy python3-yaml.
#
#   LLAMA_CPP_DIR=/tmp/llama.cpp-ref/llama.cpp tools/gguf/make_test_files.sh
#
# Writes (then xz-compressed; the build unpacks them next to themselves):
#   qwen35-dense-tiny-Q8_0.gguf  the fixture converted (no tokenizer: the fixtures have none,
#       tools/gguf/convert.py skips set_vocab); its BF16 conversion is the zstd patch below
#   blocks.gguf      one matrix of each block type: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4 quantized by
#                    gguf-py's numpy code, Q4_K, Q5_K, Q6_K copied as llama-quantize wrote them (Q4_K_M /
#                    Q5_K_M), Q2_K, Q3_K, IQ4_NL, IQ4_XS as it wrote them for --tensor-type ffn_down=TYPE
#   demo-vocab.gguf  models/demo/target's tokenizer, chat template and sampling (--vocab-only)
#   FIXTURE-BF16.gguf.zst for qwen35-dense-tiny, qwen3-next-tiny, qwen35-moe-tiny (rewritten by
#                    `llama-quantize … COPY`, as quantized files are), nemotron-h-tiny, nemotron-h-latent-tiny:
#                    the fixture converted (--no-mtp), tracked as a zstd patch against the fixture's
#                    model.safetensors (20-40 kB; xz-packed, qwen35-dense-tiny's was 2.8 MB)
#                    (the build applies it: CMakeLists.txt, kapitsa_data)
#   FIXTURE-mtp-BF16.gguf.zst for qwen35-dense-tiny, qwen3-next-tiny and nemotron-h-tiny with an MTP head (mtp_folders.py),
#                    converted with the head: patches against the trunk's weights (+ the tracked head)
#   reference.json   per tensor of the three files: gguf-py's dequantized values summarised (count, sum,
#                    sum of squares, and 16 values at fixed indices)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
LLAMA_CPP_DIR=${LLAMA_CPP_DIR:-/tmp/llama.cpp-ref/llama.cpp}
SHIM=${SHIM:-$ROOT/../shared/tools/llama.cpp/hfshim}
PY=${PYTHON:-/usr/bin/python3}
OUT=$ROOT/tests/fixtures/gguf
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export PYTHONDONTWRITEBYTECODE=1 LLAMA_CPP_DIR

SRC=$ROOT/tests/fixtures/qwen35-dense-tiny
[ -f "$SRC/model.safetensors" ] || xz -dkc "$SRC/model.safetensors.xz" > "$SRC/model.safetensors"
mkdir -p "$WORK/qwen35-dense-tiny" "$OUT"
cp "$SRC/config.json" "$SRC/model.safetensors" "$WORK/qwen35-dense-tiny/"
for t in bf16 q8_0; do
  T=$(echo $t | tr a-z A-Z)
  GGUF_NO_VOCAB=1 PYTHONPATH="$SHIM" "$PY" "$HERE/convert.py" "$WORK/qwen35-dense-tiny" --no-mtp --outtype $t \
      --outfile "$WORK/qwen35-dense-tiny-$T.gguf" > "$WORK/convert-$t.log" 2>&1 || { tail -20 "$WORK/convert-$t.log"; exit 1; }
done
for fx in qwen3-next-tiny qwen35-moe-tiny nemotron-h-tiny nemotron-h-latent-tiny; do
  FX=$ROOT/tests/fixtures/$fx
  [ -f "$FX/model.safetensors" ] || xz -dkc "$FX/model.safetensors.xz" > "$FX/model.safetensors"
  mkdir -p "$WORK/$fx"
  cp "$FX/config.json" "$FX/model.safetensors" "$WORK/$fx/"
  GGUF_NO_VOCAB=1 PYTHONPATH="$SHIM" "$PY" "$HERE/convert.py" "$WORK/$fx" --no-mtp --outtype bf16 \
      --outfile "$WORK/$fx-BF16.gguf" > "$WORK/convert-$fx.log" 2>&1 || { tail -20 "$WORK/convert-$fx.log"; exit 1; }
  if [ $fx = qwen35-moe-tiny ]; then  # as llama-quantize writes every file (COPY: same types), e.g. the
    # shared-expert gate as a vector [H] where the converter wrote [H, 1]
    "$LLAMA_CPP_DIR/build/bin/llama-quantize" "$WORK/$fx-BF16.gguf" "$WORK/$fx-copy.gguf" COPY > "$WORK/copy.log" 2>&1
    mv "$WORK/$fx-copy.gguf" "$WORK/$fx-BF16.gguf"
  fi
  zstd -q -19 -f --patch-from="$FX/model.safetensors" "$WORK/$fx-BF16.gguf" -o "$OUT/$fx-BF16.gguf.zst"
done
# The converter's MTP blocks: Qwen3.5 and Nemotron 3 folders with a head (mtp_folders.py), converted with it
# (no --no-mtp), patched against the trunk's weights followed by the tracked head where there is one (the
# same concatenation the build makes, CMakeLists.txt).
for f in qwen3-next-tiny/model.safetensors nemotron-h-tiny/model.safetensors nemotron-h-tiny-mtp/model-mtp.safetensors; do
  [ -f "$ROOT/tests/fixtures/$f" ] || xz -dkc "$ROOT/tests/fixtures/$f.xz" > "$ROOT/tests/fixtures/$f"
done
"$PY" "$HERE/mtp_folders.py" "$WORK"
for fx in qwen35-dense-tiny-mtp qwen3-next-tiny-mtp nemotron-h-tiny-mtp; do
  GGUF_NO_VOCAB=1 PYTHONPATH="$SHIM" "$PY" "$HERE/convert.py" "$WORK/$fx" --outtype bf16 \
      --outfile "$WORK/$fx-BF16.gguf" > "$WORK/convert-$fx.log" 2>&1 || { tail -20 "$WORK/convert-$fx.log"; exit 1; }
  base=("$ROOT/tests/fixtures/${fx%-mtp}/model.safetensors")
  [ -f "$ROOT/tests/fixtures/$fx/model-mtp.safetensors.xz" ] && base+=("$ROOT/tests/fixtures/$fx/model-mtp.safetensors")
  cat "${base[@]}" > "$WORK/$fx.base"
  zstd -q -19 -f --patch-from="$WORK/$fx.base" "$WORK/$fx-BF16.gguf" -o "$OUT/$fx-BF16.gguf.zst"
done
# The demo model's tokenizer as the converter writes it (metadata only; the demo tokenizer's hash is not in
# the converter's table, so its pre-tokenizer name is given: the demo uses Qwen2's split regex).
mkdir -p "$WORK/demo"
cp "$ROOT/models/demo/target/"*.json "$WORK/demo/"
GGUF_PRE=qwen2 PYTHONPATH="$SHIM" "$PY" "$HERE/convert.py" "$WORK/demo" --no-mtp --vocab-only \
    --outfile "$OUT/demo-vocab.gguf" > "$WORK/convert-demo.log" 2>&1 || { tail -20 "$WORK/convert-demo.log"; exit 1; }
for q in Q4_K_M Q5_K_M; do
  "$LLAMA_CPP_DIR/build/bin/llama-quantize" "$WORK/qwen35-dense-tiny-BF16.gguf" "$WORK/q-$q.gguf" $q 1 \
      > "$WORK/quantize-$q.log" 2>&1 || { tail -20 "$WORK/quantize-$q.log"; exit 1; }
done
for t in q2_k q3_k iq4_nl iq4_xs; do
  "$LLAMA_CPP_DIR/build/bin/llama-quantize" --tensor-type ffn_down=$t "$WORK/qwen35-dense-tiny-BF16.gguf" \
      "$WORK/q-$t.gguf" Q8_0 1 > "$WORK/quantize-$t.log" 2>&1 || { tail -20 "$WORK/quantize-$t.log"; exit 1; }
done
PYTHONPATH="$LLAMA_CPP_DIR/gguf-py" "$PY" "$HERE/blocks_and_reference.py" "$WORK" "$OUT"
cp "$WORK/qwen35-dense-tiny-Q8_0.gguf" "$OUT/"
zstd -q -19 -f --patch-from="$SRC/model.safetensors" "$WORK/qwen35-dense-tiny-BF16.gguf" \
    -o "$OUT/qwen35-dense-tiny-BF16.gguf.zst"
for f in qwen35-dense-tiny-Q8_0.gguf blocks.gguf demo-vocab.gguf; do
  xz -9 -T1 -kf "$OUT/$f"
done
ls -la "$OUT"
