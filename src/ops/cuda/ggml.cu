// Kernels over llama.cpp block weights (GGUF files, and Kapitsa's FP8 / FP4 blocks): dequantization to
// f32 (embedding rows) or bf16 hi/lo pairs (prefill: then cuBLAS), and a dequantize-and-dot GEMV for 1–8 tokens (decode and
// speculative verification) and for routed experts, for the types without the int8-activation GEMV
// (ggml_int8.cu: Q8_0, Q4_K, Q6_K). Blocks are decoded 32 values at a time by ggml_blocks.cuh, in ref's
// arithmetic.
// GEMV: one warp per output row, the row's bytes staged in shared memory where its alignment allows;
// lane l takes the row's 32-value units l, l + 32, …, decodes each once and dots it with every token's
// x (f32, fused multiply-adds in a fixed order), then the warp sums. A token's sums do not depend on how
// many tokens share the launch, so a row of a verification step is bit-equal to the same token decoded
// alone (what speculative decoding's exactness needs).
#include "ops/cuda/ggml_blocks.cuh"

#include <cuda_pipeline.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kWarps = 4;  // rows of a block

template <uint32_t Type>
__device__ __forceinline__ void decode_row_unit(const uint8_t* row, int64_t u, float (&v)[32]) {
  using G = ggml::Geometry<Type>;
  constexpr int kUnits = G::size / 32;
  ggml::decode_unit<Type>(row + (u / kUnits) * G::bytes, static_cast<int>(u % kUnits), v);
}

// out[r, :] = row rows[r] (r when rows is null) of the weight as f32 (embedding rows); one thread per 32
// values.
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

// The same rows as bf16 hi/lo pairs (DequantOut::bf16_pair: lo values at out + plane): a block of
// kDequantUnits threads decodes that many consecutive units (rows back to back in out) one a thread into
// shared memory, then writes them out as consecutive 16-byte stores. Each thread storing its own unit
// (64 bytes at a 64-byte stride between lanes) ran the 4B shape's Q4_K_M prefill at 3660 tok/s, this
// at 7890 (H200, session 21).
// Units sit 80 bytes apart in shared memory so a quarter-warp's 16-byte stores hit distinct banks.
constexpr int kDequantUnits = 128;
constexpr int kTileStride = 40;  // bf16 values per unit in the tile (32 + 8 of padding)

template <uint32_t Type>
__global__ void __launch_bounds__(kDequantUnits) dequantize_ggml_pair_kernel(GgmlArgs a, const int32_t* rows,
                                                                            __nv_bfloat16* out, int64_t R,
                                                                            int64_t plane) {
  constexpr int kPlanes = 2;  // hi, lo
  __shared__ __align__(16) __nv_bfloat16 tile[kPlanes][kDequantUnits * kTileStride];
  const int64_t units = a.K / 32, total = R * units;
  for (int64_t base = int64_t{blockIdx.x} * kDequantUnits; base < total; base += int64_t{gridDim.x} * kDequantUnits) {
    const int64_t i = base + threadIdx.x;
    if (i < total) {
      const int64_t r = i / units, u = i % units, n = rows != nullptr ? rows[r] : r;
      float v[32];
      decode_row_unit<Type>(a.blocks + n * a.row_bytes, u, v);
      auto* hi = reinterpret_cast<uint4*>(tile[0] + threadIdx.x * kTileStride);
      auto* lo = reinterpret_cast<uint4*>(tile[1] + threadIdx.x * kTileStride);
#pragma unroll
      for (int q = 0; q < 4; ++q) bf16_pair8(v + 8 * q, hi[q], lo[q]);
    }
    __syncthreads();
    const int64_t stores = (total - base < kDequantUnits ? total - base : kDequantUnits) * 4;  // 16-byte stores
#pragma unroll
    for (int p = 0; p < kPlanes; ++p) {
      auto* dst = reinterpret_cast<uint4*>(out + p * plane + base * 32);
      for (int64_t c = threadIdx.x; c < stores; c += kDequantUnits)
        dst[c] = *reinterpret_cast<const uint4*>(tile[p] + (c / 4) * kTileStride + (c % 4) * 8);
    }
    __syncthreads();  // the tile is rewritten next round
  }
}

// Per warp, one row of blocks staged in shared memory: its bytes copied with cp.async (16 or 4 bytes a
// copy, every copy of the row in flight at once) before anything is decoded. Decoding straight from
// global memory instead leaves a lane with one unit's few scattered words in flight at a time: the H200
// measured 400–600 GB/s that way (docs/cuda.md).
constexpr int64_t kStageMaxBytes = 12 * 1024;  // a warp's row (4 warps: 48 KB, the default smem cap)

__device__ __forceinline__ void stage_row(uint8_t* stage, const uint8_t* row, int64_t bytes, int lane, bool vec16) {
  if (vec16) {
    for (int64_t i = 16 * lane; i < bytes; i += 32 * 16) __pipeline_memcpy_async(stage + i, row + i, 16);
  } else {
    for (int64_t i = 4 * lane; i < bytes; i += 32 * 4) __pipeline_memcpy_async(stage + i, row + i, 4);
  }
  __pipeline_commit();
}

// The row's dot products with T ≤ MaxT tokens of x (lane l: units l, l + 32, …), summed over the warp
// into y[t·N + n].
template <uint32_t Type, int MaxT>
__device__ __forceinline__ void row_dots(const uint8_t* row, const float* __restrict__ x, int64_t K, float* y,
                                         int64_t T, int64_t N, int64_t n, int lane) {
  const int64_t units = K / 32;
  float acc[MaxT] = {};
  for (int64_t u = lane; u < units; u += 32) {
    float v[32];
    decode_row_unit<Type>(row, u, v);
#pragma unroll
    for (int t = 0; t < MaxT; ++t) {
      if (MaxT > 1 && t >= T) break;
      const auto* xt = reinterpret_cast<const float4*>(x + t * K + u * 32);
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float4 xv = xt[j];
        dot = fmaf(v[4 * j], xv.x, dot), dot = fmaf(v[4 * j + 1], xv.y, dot);
        dot = fmaf(v[4 * j + 2], xv.z, dot), dot = fmaf(v[4 * j + 3], xv.w, dot);
      }
      acc[t] += dot;
    }
  }
#pragma unroll
  for (int t = 0; t < MaxT; ++t) {
    if (MaxT > 1 && t >= T) break;
    const float s = warp_sum(acc[t]);
    if (lane == 0) y[t * N + n] = s;
  }
}

// y: [T, N] = x: [T, K] · dequant(w)ᵀ, T ≤ MaxT, one warp per row; or, Routed, grid row p = blockIdx.y
// computes expert ids[p] on x row p / k into y row p (T = 1 there; an id outside [0, E) writes NaN).
// Staged: the row goes through shared memory (stage_row; row_bytes and the rows' addresses a multiple of
// 4, of 16 with vec16); else it is decoded from global memory.
template <uint32_t Type, int MaxT, bool Routed, bool Staged>
__global__ void __launch_bounds__(kWarps * 32) ggml_gemv_kernel(const float* __restrict__ x, const GgmlArgs a,
                                                                const GgmlRoute route, float* __restrict__ y,
                                                                int64_t T, int64_t N, bool vec16) {
  extern __shared__ uint4 stage_area[];
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n = int64_t{blockIdx.x} * kWarps + warp;
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
  if constexpr (Staged) {
    uint8_t* stage = reinterpret_cast<uint8_t*>(stage_area) + warp * ((a.row_bytes + 15) / 16 * 16);
    stage_row(stage, row, a.row_bytes, lane, vec16);  // weights: before waiting for x's writer
    if constexpr (!Routed) pdl_wait();
    __pipeline_wait_prior(0);
    __syncwarp();
    row_dots<Type, MaxT>(stage, x, a.K, y, T, N, n, lane);
  } else {
    if constexpr (!Routed) pdl_wait();
    row_dots<Type, MaxT>(row, x, a.K, y, T, N, n, lane);
  }
}

// How a GEMV reads its rows: staged (and with 16-byte copies) when every row start allows it.
struct RowPlan {
  bool staged, vec16;
  size_t smem;
};
// KAPITSA_CUDA_GGML_STAGE=0 turns staging off (for measuring).
bool staging_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("KAPITSA_CUDA_GGML_STAGE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

RowPlan plan_rows(const GgmlArgs& a, uintptr_t addresses) {  // addresses: the OR of every weight's base
  RowPlan p{};
  p.staged = staging_enabled() && a.row_bytes % 4 == 0 && addresses % 4 == 0 && a.row_bytes <= kStageMaxBytes;
  p.vec16 = p.staged && a.row_bytes % 16 == 0 && addresses % 16 == 0;
  p.smem = p.staged ? static_cast<size_t>(kWarps * ((a.row_bytes + 15) / 16 * 16)) : 0;
  return p;
}

template <uint32_t Type, int MaxT, bool Routed>
void launch_gemv(const RowPlan& p, dim3 grid, cudaStream_t s, const float* x, const GgmlArgs& a, const GgmlRoute& route,
                 float* y, int64_t T, int64_t N) {
  if (p.staged)
    launch_smem(ggml_gemv_kernel<Type, MaxT, Routed, true>, grid, dim3(kWarps * 32), p.smem, s, x, a, route, y, T, N, p.vec16);
  else
    launch(ggml_gemv_kernel<Type, MaxT, Routed, false>, grid, dim3(kWarps * 32), s, x, a, route, y, T, N, false);
}

}  // namespace

bool ggml_supported(uint32_t type) {
  return ggml::with_type(type, [](auto) {});
}

void dequantize_ggml(const GgmlArgs& a, const int32_t* rows, void* out, DequantOut mode, int64_t R, cudaStream_t s) {
  if (R == 0 || a.K == 0) return;
  const int64_t units = R * (a.K / 32), plane = R * a.K;
  auto* bf = static_cast<__nv_bfloat16*>(out);
  ggml::with_type(a.type, [&](auto tag) {
    constexpr uint32_t Type = decltype(tag)::value;
    if (mode == DequantOut::bf16_pair)
      dequantize_ggml_pair_kernel<Type><<<grid_for(units, kDequantUnits), kDequantUnits, 0, s>>>(a, rows, bf, R, plane);
    else dequantize_ggml_kernel<Type><<<grid_for(units, 128), 128, 0, s>>>(a, rows, static_cast<float*>(out), R);
  });
}

void ggml_gemv(const float* x, const GgmlArgs& a, float* y, int64_t T, int64_t N, cudaStream_t s) {
  if (T == 0 || N == 0) return;
  const dim3 grid(static_cast<unsigned>((N + kWarps - 1) / kWarps));
  const RowPlan p = plan_rows(a, reinterpret_cast<uintptr_t>(a.blocks));
  ggml::with_type(a.type, [&](auto tag) {
    constexpr uint32_t Type = decltype(tag)::value;
    if (T == 1) launch_gemv<Type, 1, false>(p, grid, s, x, a, GgmlRoute{}, y, T, N);
    else launch_gemv<Type, kGemvMaxTokens, false>(p, grid, s, x, a, GgmlRoute{}, y, T, N);
  });
}

void ggml_experts(const float* x, const GgmlArgs& a, const GgmlRoute& route, uintptr_t addresses, float* y, int64_t T,
                  int64_t N, cudaStream_t s) {
  if (T == 0 || N == 0) return;
  const dim3 grid(static_cast<unsigned>((N + kWarps - 1) / kWarps), static_cast<unsigned>(T * route.k));
  const RowPlan p = plan_rows(a, addresses);
  ggml::with_type(a.type, [&](auto tag) {
    constexpr uint32_t Type = decltype(tag)::value;
    launch_gemv<Type, 1, true>(p, grid, s, x, a, route, y, int64_t{1}, N);
  });
}

}  // namespace kapitsa::ops::cuda::kernels
