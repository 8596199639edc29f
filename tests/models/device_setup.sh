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
    if not out.exists():
        out.write_bytes(lzma.decompress(xz.read_bytes()))
PY
for z in "$REPO"/tests/fixtures/*/*.zst; do  # (zstd-packed fixtures: the GGUF files)
  [ -e "${z%.zst}" ] || zstd -q -d -k "$z" -o "${z%.zst}" 2>/dev/null ||
    python3 -c "import sys, zstandard; open(sys.argv[2], 'wb').write(zstandard.ZstdDecompressor().decompressobj().decompress(open(sys.argv[1], 'rb').read()))" "$z" "${z%.zst}" 2>/dev/null ||
    { rm -f "${z%.zst}"; echo "could not unpack $z (neither zstd nor python's zstandard here)"; }
done
step() {  # step LOG TIMEOUT CMD...: output into $OUT/LOG; rc and time on stdout
  local log=$1 limit=$2 t=$(date +%s%N); shift 2
  timeout "$limit" "$@" > "$OUT/$log" 2>&1
  echo "  -> $log: rc=$? in $(( ($(date +%s%N) - t) / 1000000 )) ms"
}
summ() { grep -E "^\[  (PASSED|FAILED|SKIPPED) +\]|^\[==========\]" "$1" | head -${2:-40}; }
