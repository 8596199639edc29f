#!/usr/bin/env bash
# Packs what a GPU-machine call needs into .device/gpu/ (git-excluded; carry [".device"]): the stripped
# test and bench binaries of a CUDA build, the shared libraries the GPU machine lacks, the bench configs,
# and the driver scripts (decode_speed_run.sh, spec_device_run.sh, device_setup.sh, profile_step.py, amx_device_run.sh,
# prefill_run.sh with prefill_kernels.py, cuda_device_run.sh). docs/cuda.md shows the
# call. Usage: [BINARIES="bench_model test_ops"] bash tests/ops/cuda/pack_device_bundle.sh [BUILD_DIR]
# (default build/release; BINARIES: a subset of the list below, when the tracked tree and the bundle
# would pass the device's 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/../../.."
B=${1:-build/release}
cmake --build "$B" --target test_ops test_ops_cuda bench_ops_cuda cuda_timeline test_models test_runtime kapitsa bench_model bench_runtime bench_ops bench_spec
stage=$(mktemp -d)
mkdir -p "$stage/lib" "$stage/configs"
for b in tests/test_ops tests/ops/cuda/test_ops_cuda tests/ops/cuda/bench_ops_cuda tests/test_models tests/test_runtime kapitsa \
         bench/bench_model bench/bench_runtime bench/bench_ops bench/bench_spec; do
  name=$(basename "$b")
  [ -z "${BINARIES:-}" ] || [[ " $BINARIES " == *" $name "* ]] || continue
  strip -o "$stage/$name" "$B/$b"
done
cp bench/configs/*.json "$stage/configs/"
# The kernel timeline (tests/ops/cuda/timeline) and the CUPTI it loads.
cp "$B/tests/ops/cuda/libcuda_timeline.so" tests/ops/cuda/timeline/cuda_timeline.py "$stage/"
cp -L /usr/local/cuda/lib64/libcupti.so.13 "$stage/lib/"
cp /usr/bin/zstd "$stage/"  # applies the GGUF fixtures' patches there (device_setup.sh)
for l in libfmt.so.9 libpcre2-8.so.0 libutf8proc.so.2 libcpp-httplib.so.0.11 libsimdjson.so.14 libssl.so.3 \
         libcrypto.so.3 libbrotlidec.so.1 libbrotlienc.so.1 libbrotlicommon.so.1 libbenchmark.so.1debian; do
  cp -L "/lib/x86_64-linux-gnu/$l" "$stage/lib/"
done
mkdir -p .device/gpu
grep -qx ".device/" .git/info/exclude 2>/dev/null || { mkdir -p .git/info && echo ".device/" >> .git/info/exclude; }
rm -f .device/gpu/bin.tar.xz
# One xz stream with a 64 MiB dictionary (-9e, one thread): the binaries share most of their code, so
# the bundle of five is ~9 MB instead of ~20 with tar -J's default (the tracked tree leaves ~14 MB).
(cd "$stage" && XZ_OPT="${XZ_OPT:--9e -T1}" tar -cJf "$OLDPWD/.device/gpu/bin.tar.xz" .)
cp tests/ops/cuda/decode_speed_run.sh tests/ops/cuda/spec_device_run.sh tests/models/device_setup.sh tests/ops/cuda/profile_step.py tests/ops/amx_device_run.sh \
   tests/ops/cuda/prefill_run.sh tests/ops/cuda/prefill_kernels.py tests/models/cuda_device_run.sh .device/gpu/
rm -rf "$stage"
du -sh .device/gpu
