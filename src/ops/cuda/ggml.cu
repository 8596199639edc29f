// Kernels over llama.cpp block weights (GGUF files, and Kapitsa's FP8 / FP4 blocks): dequantization to
// f32 (prefill: then cuBLAS; embedding rows), and a dequantize-and-dot GEMV for 1–8 tokens (decode and
// speculative verification) and for routed experts. Blocks are decoded 32 values at a time by
// ggml_blocks.cuh, in ref's arithmetic.
// GEMV: one warp per output row; lane l takes the row's 32-value units l, l + 32, …, decodes each once
// and dots it with every token's x (f32, fused multiply-adds in a fixed order), then the warp sums. A
// token's sums do not depend on how many tokens share the launch, so a row of a verification step is
// bit-equal to the same token decoded alone (what speculative decoding's exactness needs).
#include "ops/cuda/ggml_blocks.cuh"

#include <cmath>

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kWarps = 4;  // rows of a block

template <uint32_t Type>
__device__ __forceinline__ void decode_row_unit(const uint8_t* row, int64_t u, float (&v)[32]) {
  using G = ggml::Geometry<Type>;
  constexpr int kUnits = G::size / 32;
  ggml::decode_unit<Type>(row + (u / kUnits) * G::bytes, static_cast<int>(u % kUnits), v);
}

// out[r, :] = row rows[r] (r when rows is null) of the weight; one thread per 32 values.
template <uint32_t Type>
__global__ void dequantize_ggml_kernel(GgmlArgs a, const int32_t* rows, float* out, int64_t R) {
  const int64_t units = a.K / 32;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < R * units; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / units, u = i % units, n = rows != nullptr ? rows[r] : r;
    float v[32];
    decode_row_unit<Type>(a.blocks + n * a.row_bytes, u, v);
    auto* o = reinterpret_cast<float4*>(out + r * a.K + u * 32);
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
  }
}

// y: [T, N] = x: [T, K] · dequant(w)ᵀ, T ≤ MaxT; or, Routed, grid row p = blockIdx.y computes expert
// ids[p] on x row p / k into y row p (T = 1 there; an id outside [0, E) writes NaN).
template <uint32_t Type, int MaxT, bool Routed>
__global__ void __launch_bounds__(kWarps * 32) ggml_gemv_kernel(const float* __restrict__ x, const GgmlArgs a,
                                                                const GgmlRoute route, float* __restrict__ y,
                                                                int64_t T, int64_t N) {
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5);
  if (n >= N) return;
  const uint8_t* blocks = a.blocks;
  if constexpr (Routed) {
    const int64_t p = blockIdx.y;
    pdl_wait();  // the router wrote ids
    const int32_t id = route.ids[p];
    x += (p / route.k) * a.K, y += p * N;
    if (id < 0 || id >= route.E) {
      if (lane == 0) y[n] = NAN;
      return;
    }
    blocks = route.table[id];
  }
  const uint8_t* row = blocks + n * a.row_bytes;
  const int64_t units = a.K / 32;
  float v[32];
  int64_t u = lane;
  if (u < units) decode_row_unit<Type>(row, u, v);  // weights: before waiting for x's writer
  if constexpr (!Routed) pdl_wait();
  float acc[MaxT] = {};
  for (; u < units; u += 32) {
#pragma unroll
    for (int t = 0; t < MaxT; ++t) {
      if (MaxT > 1 && t >= T) break;
      const auto* xt = reinterpret_cast<const float4*>(x + t * a.K + u * 32);
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float4 xv = xt[j];
        dot = fmaf(v[4 * j], xv.x, dot), dot = fmaf(v[4 * j + 1], xv.y, dot);
        dot = fmaf(v[4 * j + 2], xv.z, dot), dot = fmaf(v[4 * j + 3], xv.w, dot);
      }
      acc[t] += dot;
    }
    if (u + 32 < units) decode_row_unit<Type>(row, u + 32, v);
  }
#pragma unroll
  for (int t = 0; t < MaxT; ++t) {
    if (MaxT > 1 && t >= T) break;
    const float s = warp_sum(acc[t]);
    if (lane == 0) y[t * N + n] = s;
  }
}

}  // namespace

bool ggml_supported(uint32_t type) {
  return ggml::with_type(type, [](auto) {});
}

void dequantize_ggml(const GgmlArgs& a, const int32_t* rows, float* out, int64_t R, cudaStream_t s) {
  if (R == 0 || a.K == 0) return;
  constexpr int kThreads = 128;
  ggml::with_type(a.type, [&](auto tag) {
    constexpr uint32_t Type = decltype(tag)::value;
    dequantize_ggml_kernel<Type><<<grid_for(R * (a.K / 32), kThreads), kThreads, 0, s>>>(a, rows, out, R);
  });
}

void ggml_gemv(const float* x, const GgmlArgs& a, float* y, int64_t T, int64_t N, cudaStream_t s) {
  if (T == 0 || N == 0) return;
  const dim3 grid(static_cast<unsigned>((N + kWarps - 1) / kWarps));
  ggml::with_type(a.type, [&](auto tag) {
    constexpr uint32_t Type = decltype(tag)::value;
    if (T == 1) launch(ggml_gemv_kernel<Type, 1, false>, grid, dim3(kWarps * 32), s, x, a, GgmlRoute{}, y, T, N);
    else launch(ggml_gemv_kernel<Type, kGemvMaxTokens, false>, grid, dim3(kWarps * 32), s, x, a, GgmlRoute{}, y, T, N);
  });
}

void ggml_experts(const float* x, const GgmlArgs& a, const GgmlRoute& route, float* y, int64_t T, int64_t N,
                  cudaStream_t s) {
  if (T == 0 || N == 0) return;
  const dim3 grid(static_cast<unsigned>((N + kWarps - 1) / kWarps), static_cast<unsigned>(T * route.k));
  ggml::with_type(a.type, [&](auto tag) {
    constexpr uint32_t Type = decltype(tag)::value;
    launch(ggml_gemv_kernel<Type, 1, true>, grid, dim3(kWarps * 32), s, x, a, route, y, int64_t{1}, N);
  });
}

}  // namespace kapitsa::ops::cuda::kernels
