# Sourced by the GPU-machine scripts (tests/models/cuda_device_run.sh, tests/ops/cuda/decode_speed_run.sh),
# copied beside them into the carried folder DEV. Expects BUILT_IN (the worktree the binaries were built
# in), DEV (the carried folder: binaries, lib/) and REPO (the checkout on the GPU machine); BUILD_SUBDIR
# names the build folder whose `kapitsa` the test binaries run (KAPITSA_BIN; default build/release).
# The test binaries have their build worktree compiled in (KAPITSA_TEST_DATA, KAPITSA_BIN): that path is
# recreated as links to this checkout, and the compressed fixtures (.xz, .zst) are unpacked.
export LD_LIBRARY_PATH=$DEV/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
for b in "$DEV"/test_* "$DEV"/bench_* "$DEV"/kapitsa; do
  [ -x "$b" ] && ldd "$b" | grep "not found" | sed "s|^|$(basename "$b"): |"
done
mkdir -p "$BUILT_IN/${BUILD_SUBDIR:=build/release}"
[ -x "$DEV/kapitsa" ] && cp "$DEV/kapitsa" "$BUILT_IN/$BUILD_SUBDIR/kapitsa"
ln -sfn "$REPO/tests" "$BUILT_IN/tests"
ln -sfn "$REPO/models" "$BUILT_IN/models"
python3 - "$REPO" <<'PY'
import lzma, pathlib, sys
root = pathlib.Path(sys.argv[1])
for xz in list(root.glob("tests/fixtures/*/*.xz")) + list(root.glob("models/demo/*/*.xz")):
    out = xz.with_suffix("")
    # Also when the .xz is newer: a warm machine keeps the checkout's ignored files between calls, so a
    # call carrying changed weights would otherwise test the last call's (session 36).
    if not out.exists() or out.stat().st_mtime < xz.stat().st_mtime:
        out.write_bytes(lzma.decompress(xz.read_bytes()))
PY
# The GGUF fixtures are zstd patches against their fixture's model.safetensors (CMakeLists.txt): applied
# with the zstd the bundle carries (the GPU machine has none).
ZSTD=$(command -v zstd || echo "$DEV/zstd")
# FIXTURE-mtp-TYPE.gguf patches FIXTURE's model.safetensors followed by FIXTURE-mtp's model-mtp.safetensors
# (as CMakeLists.txt unpacks them).
for z in "$REPO"/tests/fixtures/gguf/*.gguf.zst; do
  out=${z%.zst}
  fixture=$(basename "$out" | sed -E 's/-[A-Z0-9_]+\.gguf$//')
  base="$REPO/tests/fixtures/${fixture%-mtp}/model.safetensors"
  [ -e "$REPO/tests/fixtures/$fixture/model-mtp.safetensors" ] && base="$base $REPO/tests/fixtures/$fixture/model-mtp.safetensors"
  [ -e "$out" ] || { cat $base > "$out.base" && "$ZSTD" -qdf --patch-from="$out.base" "$z" -o "$out"; } ||
    { rm -f "$out"; echo "could not unpack $z (no zstd at $ZSTD)"; }
  rm -f "$out.base"
done
step() {  # step LOG TIMEOUT CMD...: output into $OUT/LOG; rc and time on stdout
  local log=$1 limit=$2 t=$(date +%s%N); shift 2
  timeout "$limit" "$@" > "$OUT/$log" 2>&1
  echo "  -> $log: rc=$? in $(( ($(date +%s%N) - t) / 1000000 )) ms"
}
summ() { grep -E "^\[  (PASSED|FAILED|SKIPPED) +\]|^\[==========\]" "$1" | head -${2:-40}; }
