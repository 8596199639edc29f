// bench_ops_cuda: times a few CUDA ops at model-like shapes (decode and prefill) and prints µs per call
// with the bytes or FLOPs each must move, against the H200's measured ceilings (~4.3 TB/s copy,
// ~790 TFLOP/s bf16). Inputs are random (never zeros). Not a test: asserts nothing, run by hand on
// the GPU machine (docs/cuda.md). Exits 0 with a message when there is no GPU.
#include "ops/cuda/cuda.h"
#include "ops/cuda/device_buffer.h"
#include "test_util.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

namespace {
using namespace kapitsa;
using ops::cuda::DeviceBuffer;

std::mt19937_64 rng{kapitsa::testing::fresh_seed()};

DeviceBuffer random_device(DType dt, Shape s, float lo = -1, float hi = 1) {
  return DeviceBuffer::upload(kapitsa::testing::random_buffer(rng, dt, s, lo, hi));
}

// Median of 5 runs of `reps` calls each, in µs per call.
double time_us(const std::function<void()>& op, int reps = 20) {
  for (int i = 0; i < 3; ++i) op();
  ops::cuda::synchronize();
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) op();
    ops::cuda::synchronize();
    runs.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  std::sort(runs.begin(), runs.end());
  return runs[2];
}

void report(const char* what, double us, double bytes, double flops) {
  std::printf("%-58s %9.1f us  %7.0f GB/s  %7.1f TFLOP/s\n", what, us, bytes / us * 1e-3, flops / us * 1e-6);
}

}  // namespace

int main() {
  if (!ops::cuda::device_available()) {
    std::printf("bench_ops_cuda: %s\n", ops::cuda::device_description().c_str());
    return 0;
  }
  std::printf("%s\n", ops::cuda::device_description().c_str());
  for (auto [T, N, K] : std::vector<std::array<int64_t, 3>>{{1, 4096, 4096}, {1, 12288, 4096}, {1, 151936, 2560},
                                                             {8, 12288, 4096}, {512, 4096, 4096}, {512, 12288, 4096}}) {
    auto x = random_device(DType::f32, {T, K});
    auto w = random_device(DType::bf16, {N, K});
    auto y = DeviceBuffer::allocate(DType::f32, {T, N});
    char name[96];
    std::snprintf(name, sizeof name, "matmul bf16 T=%ld N=%ld K=%ld", static_cast<long>(T), static_cast<long>(N),
                  static_cast<long>(K));
    report(name, time_us([&] { ops::cuda::matmul(x, Linear(w.tensor()), y); }), 2.0 * N * K + 4.0 * T * (K + N), 2.0 * T * N * K);
  }
  // One-token GEMVs of the Qwen3.5-4B shape (down, attention o / GDN out, GDN q/k/v/z/b/a, lm head) and its
  // MLP gate+up with SwiGLU. Each call reads the next of several copies of the weight (≥ 256 MB in all),
  // so the 50 MB L2 holds none of it, as in a decode step.
  for (auto [N, K, swiglu] : std::vector<std::array<int64_t, 3>>{
           {2560, 9216, 0}, {2560, 4096, 0}, {12352, 2560, 0}, {248320, 2560, 0}, {9216, 2560, 1}}) {
    const int64_t parts = swiglu ? 2 : 1, bytes = 2 * N * K * parts;
    const int64_t copies = std::max<int64_t>(1, (int64_t{256} << 20) / bytes);
    std::vector<DeviceBuffer> w;
    for (int64_t i = 0; i < copies * parts; ++i) w.push_back(random_device(DType::bf16, {N, K}));
    auto x = random_device(DType::f32, {1, K});
    auto y = DeviceBuffer::allocate(DType::f32, {1, N}), up = DeviceBuffer::allocate(DType::f32, {1, N});
    int64_t next = 0;
    char name[96];
    std::snprintf(name, sizeof name, "%s bf16 T=1 N=%ld K=%ld (4B decode, cold)", swiglu ? "matmul_swiglu" : "matmul",
                  static_cast<long>(N), static_cast<long>(K));
    report(name, time_us([&] {
             const int64_t c = next++ % copies;
             if (swiglu)
               ops::cuda::matmul_swiglu(x, Linear(w[2 * c].tensor()), Linear(w[2 * c + 1].tensor()), up, y);
             else
               ops::cuda::matmul(x, Linear(w[c].tensor()), y);
           }),
           static_cast<double>(bytes) + 4.0 * (K + N), 2.0 * N * K * parts);
  }
  // MLX affine (group 64, bf16 scales and biases): the fused dequantize-GEMV; bytes are codes + scales + biases.
  for (auto [T, N, K, bits] : std::vector<std::array<int64_t, 4>>{{1, 4096, 4096, 4}, {1, 12288, 4096, 4},
                                                                   {1, 2560, 9216, 4}, {1, 151936, 2560, 4},
                                                                   {1, 12288, 4096, 8}, {4, 12288, 4096, 4},
                                                                   {8, 12288, 4096, 4}}) {
    const int64_t gs = 64;
    auto x = random_device(DType::f32, {T, K});
    Buffer host_codes = Buffer::allocate(DType::u32, {N, K * bits / 32});
    for (int64_t i = 0; i < host_codes.tensor().numel(); ++i) host_codes.tensor().data_as<uint32_t>()[i] = static_cast<uint32_t>(rng());
    auto codes = DeviceBuffer::upload(host_codes);
    auto scales = random_device(DType::bf16, {N, K / gs}), biases = random_device(DType::bf16, {N, K / gs});
    auto y = DeviceBuffer::allocate(DType::f32, {T, N});
    const Linear w = Linear::affine(codes.tensor(), scales.tensor(), biases.tensor(), static_cast<int>(bits), gs);
    char name[96];
    std::snprintf(name, sizeof name, "matmul affine %ld-bit T=%ld N=%ld K=%ld", static_cast<long>(bits),
                  static_cast<long>(T), static_cast<long>(N), static_cast<long>(K));
    report(name, time_us([&] { ops::cuda::matmul(x, w, y); }), N * K * bits / 8.0 + 4.0 * N * K / gs + 4.0 * T * (K + N),
           2.0 * T * N * K);
  }
  for (auto [T, ctx] : std::vector<std::array<int64_t, 2>>{{1, 4096}, {1, 32768}, {512, 512}}) {
    const int64_t Hq = 32, Hkv = 8, D = 128;
    auto q = random_device(DType::f32, {T, Hq, D});
    auto k = random_device(DType::f32, {ctx, Hkv, D}), v = random_device(DType::f32, {ctx, Hkv, D});
    auto o = DeviceBuffer::allocate(DType::f32, {T, Hq, D});
    char name[96];
    std::snprintf(name, sizeof name, "attention Hq=32 Hkv=8 D=128 T=%ld context=%ld", static_cast<long>(T),
                  static_cast<long>(ctx));
    report(name, time_us([&] { ops::cuda::attention(q, k, v, ctx - T, 0.088f, o); }), 8.0 * ctx * Hkv * D,
           4.0 * T * ctx * Hq * D);
  }
  for (int64_t T : {1, 512}) {
    const int64_t Hk = 16, Hv = 32, Dk = 128, Dv = 128;
    auto q = random_device(DType::f32, {T, Hk, Dk}, -0.08f, 0.08f), k = random_device(DType::f32, {T, Hk, Dk}, -0.08f, 0.08f);
    auto v = random_device(DType::f32, {T, Hv, Dv}), g = random_device(DType::f32, {T, Hv}, -1, -0.01f);
    auto beta = random_device(DType::f32, {T, Hv}, 0.1f, 0.9f), state = random_device(DType::f32, {Hv, Dk, Dv}, -0.1f, 0.1f);
    auto o = DeviceBuffer::allocate(DType::f32, {T, Hv, Dv});
    char name[96];
    std::snprintf(name, sizeof name, "gated_delta_rule Hk=16 Hv=32 Dk=Dv=128 T=%ld", static_cast<long>(T));
    report(name, time_us([&] { ops::cuda::gated_delta_rule_recurrent(q, k, v, g, beta, state, o); }),
           8.0 * Hv * Dk * Dv + 4.0 * T * (2 * Hk * Dk + 2 * Hv * Dv), 6.0 * T * Hv * Dk * Dv);
  }
  for (int64_t T : {1, 512}) {
    const int64_t H = 64, P = 64, G = 8, N = 128;
    auto x = random_device(DType::f32, {T, H, P}), dt = random_device(DType::f32, {T, H}, -4, 0);
    auto B = random_device(DType::f32, {T, G, N}), C = random_device(DType::f32, {T, G, N});
    auto A_log = random_device(DType::f32, {H}), D = random_device(DType::f32, {H}), bias = random_device(DType::f32, {H});
    auto state = random_device(DType::f32, {H, P, N}, -0.1f, 0.1f);
    auto y = DeviceBuffer::allocate(DType::f32, {T, H, P});
    char name[96];
    std::snprintf(name, sizeof name, "ssd_scan H=64 P=64 G=8 N=128 T=%ld", static_cast<long>(T));
    report(name, time_us([&] { ops::cuda::ssd_scan_recurrent(x, dt, B, C, A_log, D, bias, 0, INFINITY, state, y); }),
           8.0 * H * P * N + 4.0 * T * (2 * H * P + 2 * G * N), 4.0 * T * H * P * N);
  }
  {
    auto x = random_device(DType::f32, {1, 4096}), w = random_device(DType::f32, {4096});
    auto y = DeviceBuffer::allocate(DType::f32, {1, 4096});
    report("rms_norm 1x4096 (launch-bound)", time_us([&] { ops::cuda::rms_norm(x, w, 1e-6f, 0, y); }, 200), 3 * 4 * 4096.0,
           0);
  }
  return 0;
}
