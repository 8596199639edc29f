#!/bin/bash
# One GPU-machine call that checks speculative decoding and the batch-invariant GEMVs on the device
# (docs/speculative-decoding.md, "Why the output is identical"; docs/cuda.md, session 34): the op tests
# with each backend's claimed invariant rows, memcheck of the GEMV kernels, the engine and model tests of
# speculation on cuda, bench_spec (cost-aware, warm), kapitsa run with each proposer (the same text as
# plain), bf16 decode batches with the few-row GEMV against cuBLAS (KAPITSA_GEMV_ROWS=0), and the 4B
# shape's batch-1 decode and 512-token prefill.
# Bundle: XZ_OPT="-9e -T1" BINARIES="test_ops test_models test_runtime kapitsa bench_spec bench_model" \
#   bash tests/ops/cuda/pack_device_bundle.sh build/release
# Device run (carry [".device"]): tar -xJf .device/gpu/bin.tar.xz -C .device/gpu &&
#   REPO=$PWD bash .device/gpu/spec_device_run.sh /work/main
# CONFIG=qwen35-0.8b (default; qwen35-4b takes a minute more to write its checkpoint); BENCH=0 skips the benches, TESTS=0 the tests,
# SPEC=0 the speculation half of the benches (kapitsa run and bench_spec)
# (the two halves fit one 10-minute call each). Most important first: a call cut off at its limit loses the rest.
BUILT_IN=${1:?the worktree the binaries were built in}
DEV="$(cd "$(dirname "$0")" && pwd)"
REPO="${REPO:-$PWD}"
: "${BUILD_SUBDIR:=build/release}"
source "$DEV/device_setup.sh"  # links, fixtures, step/summ
SCRATCH=$(mktemp -d)  # logs kept out of $OUT, which brings back at most 8 files
cd "$BUILT_IN"
if [ "${TESTS:-1}" = 1 ]; then
echo "== op tests: invariant rows, GEMVs"
step ops.log 120 "$DEV/test_ops" --gtest_filter='*RowsOfSeveralTokens*/cuda:*Matmul*/cuda:*Gemv*/cuda:*Swiglu*/cuda:*Affine*/cuda:*Ggml*/cuda'
summ $OUT/ops.log 8; grep -B3 -A8 "Failure" $OUT/ops.log | head -30
echo "== models and engine on cuda"
step models.log 240 "$DEV/test_models" --gtest_filter='*Cuda*:Device*:*GreedyChain*:*ArgmaxOutputs*:*Mtp*:*Gguf*'
summ $OUT/models.log 12; grep -B3 -A8 "Failure" $OUT/models.log | head -30
step runtime.log 300 "$DEV/test_runtime" --gtest_filter='*Cuda*:*Draft*:*Mtp*:RunCli*:ProposeDrafts*:Speculation*'
summ $OUT/runtime.log 12; grep -B3 -A8 "Failure" $OUT/runtime.log | head -30
echo "== forced rows a warp, memcheck"
for r in 1 4 8; do  # the rows a warp that only KAPITSA_GEMV_ROWS picks (measuring) must be invariant too
  timeout 60 env KAPITSA_GEMV_ROWS=$r "$DEV/test_ops" --gtest_filter='*RowsOfSeveralTokens*/cuda' > $SCRATCH/ops_rows$r.log 2>&1
  echo "  KAPITSA_GEMV_ROWS=$r (rc $?):"; summ $SCRATCH/ops_rows$r.log 4
done
step memcheck.log 180 compute-sanitizer --tool memcheck --leak-check no "$DEV/test_ops" --gtest_filter='*RowsOf*/cuda:*Matmul*/cuda'
grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) \]" $OUT/memcheck.log | tail -3
fi
[ "${BENCH:-1}" = 1 ] || exit 0
echo "== bf16 decode batches: few-row GEMV against cuBLAS"
C="$DEV/configs/${CONFIG:-qwen35-0.8b}.json"
for b in 2 4 8; do
  for v in X=1 KAPITSA_GEMV_ROWS=0; do
    step batch.log 120 env $v "$DEV/bench_model" --config "$C" --device cuda --prompt 16 --decode 32 --batch $b
    echo "  batch $b $v: $(grep -E '\| decode' $OUT/batch.log | tr -s ' ' | tr '\n' ' ')"
  done
done
echo "== 4B shape, batch 1 decode and 512-token prefill"
step batch4b.log 150 "$DEV/bench_model" --config "$DEV/configs/qwen35-4b.json" --device cuda --prompt 512 --decode 64
echo "  4B: $(grep -E '\| (prefill|decode)' $OUT/batch4b.log | tr -s ' ' | tr '\n' ' ')"
[ "${SPEC:-1}" = 1 ] || exit 0
echo "== kapitsa run: each proposer prints plain decoding's text"
prompt="def parse_config(path):"
for spec in none draft mtp ngram; do
  extra=(); [ "$spec" = draft ] && extra=(--draft models/demo/draft --spec-k 3)
  [ "$spec" = mtp ] && extra=(--spec-k 2)
  "$DEV/kapitsa" run --model models/demo/target --device cuda --temperature 0 --max-tokens 400 --spec "$spec" \
    "${extra[@]}" "$prompt" > "$SCRATCH/run_$spec.txt" 2> "$SCRATCH/run_$spec.err"
  echo "  $spec: $(tail -1 "$SCRATCH/run_$spec.err" | cut -c1-160)"
  if [ "$spec" != none ]; then
    if cmp -s "$SCRATCH/run_none.txt" "$SCRATCH/run_$spec.txt"; then echo "    same text as plain"; else echo "    TEXT DIFFERS from plain"; fi
  fi
done
echo "== bench_spec (demo pair)"
for flags in "--cost-aware" "--cost-aware --warm"; do
  step spec.log 240 "$DEV/bench_spec" --model models/demo/target --draft models/demo/draft --device cuda --repeat 5 \
    --proposers mtp draft ngram --spec-k 4 --mtp-k 2 --draft-k 3 $flags
  echo "  bench_spec $flags:"; grep -E "^\|" $OUT/spec.log | tail -8
done
