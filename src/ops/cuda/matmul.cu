// Kernel of matmul for a few tokens (decode): a GEMV reading the weight once for up to kGemvMaxTokens
// rows of x. One warp per output feature n: lanes stride over K (coalesced weight reads), accumulate
// in f32 for every token, then a warp sum. When rows are 16-byte aligned each lane reads 16 bytes of
// the weight at a time (8 bf16/f16 or 4 f32), and for 2 or more tokens a warp computes 4 outputs so each
// x load serves 4 weight rows; otherwise one element. Larger T goes to cuBLAS (matmul.cpp).
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kWarps = 8;

template <typename W>
__device__ __forceinline__ float widen(W v) {
  if constexpr (std::is_same_v<W, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<W, __nv_bfloat16>) return __bfloat162float(v);
  else return v;
}

template <typename W>
__global__ void gemv_kernel(const float* x, const W* w, float* y, int64_t T, int64_t K, int64_t N) {
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * int64_t{kWarps} + (threadIdx.x >> 5);
  if (n >= N) return;
  const W* wn = w + n * K;
  float acc[kGemvMaxTokens] = {};
  for (int64_t k = lane; k < K; k += 32) {
    const float wk = widen(wn[k]);
#pragma unroll
    for (int t = 0; t < kGemvMaxTokens; ++t)
      if (t < T) acc[t] += x[t * K + k] * wk;
  }
#pragma unroll
  for (int t = 0; t < kGemvMaxTokens; ++t) {
    if (t < T) {
      const float sum = warp_sum(acc[t]);
      if (lane == 0) y[t * N + n] = sum;
    }
  }
}

// Requires K % (16 / sizeof(W)) == 0 and 16-byte aligned w and x. Each lane issues kUnroll 16-byte
// weight loads before using any (decode launches few warps per SM: without several loads in flight
// per lane the GEMV stalls on memory latency at about half the bandwidth). Launched with MaxT = 1 (one
// token, no per-token guards); 2 … kGemvMaxTokens tokens go to gemv_rows_kernel.
template <typename W, int MaxT>
__global__ void gemv_vec_kernel(const float* x, const W* __restrict__ w, float* y, int64_t T, int64_t K, int64_t N) {
  constexpr int kVec = 16 / sizeof(W), kUnroll = 4, kStep = 32 * kVec;
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * int64_t{kWarps} + (threadIdx.x >> 5);
  if (n >= N) return;
  const W* wn = w + n * K;
  float acc[MaxT] = {};
  auto use = [&](const uint4& raw, int64_t k) {
    const W* v = reinterpret_cast<const W*>(&raw);
    float wk[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) wk[i] = widen(v[i]);
#pragma unroll
    for (int t = 0; t < MaxT; ++t) {
      if (MaxT == 1 || t < T) {
#pragma unroll
        for (int i = 0; i < kVec; i += 4) {
          const float4 xv = *reinterpret_cast<const float4*>(x + t * K + k + i);
          acc[t] += xv.x * wk[i] + xv.y * wk[i + 1] + xv.z * wk[i + 2] + xv.w * wk[i + 3];
        }
      }
    }
  };
  int64_t k = int64_t{lane} * kVec;
  for (; k + (kUnroll - 1) * kStep < K; k += kUnroll * kStep) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) raw[u] = __ldg(reinterpret_cast<const uint4*>(wn + k + u * kStep));
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) use(raw[u], k + u * kStep);
  }
  for (; k < K; k += kStep) use(__ldg(reinterpret_cast<const uint4*>(wn + k)), k);
#pragma unroll
  for (int t = 0; t < MaxT; ++t) {
    if (MaxT == 1 || t < T) {
      const float sum = warp_sum(acc[t]);
      if (lane == 0) y[t * N + n] = sum;
    }
  }
}

// 2 … kGemvMaxTokens tokens: each warp computes kRows consecutive outputs, so every float4 of x it loads
// serves kRows weight rows (with one row per warp the x reads, T floats per weight element, bound the
// kernel at a fraction of the weight bandwidth). Same per-lane order of accumulation as above.
constexpr int kRows = 4;
template <typename W>
__global__ void gemv_rows_kernel(const float* x, const W* __restrict__ w, float* y, int64_t T, int64_t K, int64_t N) {
  constexpr int kVec = 16 / sizeof(W), kStep = 32 * kVec;
  const int lane = threadIdx.x & 31;
  const int64_t n0 = (blockIdx.x * int64_t{kWarps} + (threadIdx.x >> 5)) * kRows;
  if (n0 >= N) return;
  const int rows = N - n0 < kRows ? static_cast<int>(N - n0) : kRows;
  float acc[kRows][kGemvMaxTokens] = {};
  for (int64_t k = int64_t{lane} * kVec; k < K; k += kStep) {
    float wk[kRows][kVec];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r < rows) {
        const uint4 raw = __ldg(reinterpret_cast<const uint4*>(w + (n0 + r) * K + k));
        const W* v = reinterpret_cast<const W*>(&raw);
#pragma unroll
        for (int i = 0; i < kVec; ++i) wk[r][i] = widen(v[i]);
      } else {
#pragma unroll
        for (int i = 0; i < kVec; ++i) wk[r][i] = 0.0f;
      }
    }
#pragma unroll
    for (int t = 0; t < kGemvMaxTokens; ++t) {
      if (t < T) {
#pragma unroll
        for (int i = 0; i < kVec; i += 4) {
          const float4 xv = *reinterpret_cast<const float4*>(x + t * K + k + i);
#pragma unroll
          for (int r = 0; r < kRows; ++r)
            acc[r][t] += xv.x * wk[r][i] + xv.y * wk[r][i + 1] + xv.z * wk[r][i + 2] + xv.w * wk[r][i + 3];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int t = 0; t < kGemvMaxTokens; ++t) {
      if (t < T) {
        const float sum = warp_sum(acc[r][t]);
        if (lane == 0 && r < rows) y[t * N + n0 + r] = sum;
      }
    }
  }
}

template <typename W>
void launch_gemv(const float* x, const W* w, float* y, int64_t T, int64_t K, int64_t N, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((N + kWarps - 1) / kWarps);
  const bool aligned = K % static_cast<int64_t>(16 / sizeof(W)) == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (!aligned) {
    gemv_kernel<<<blocks, kWarps * 32, 0, s>>>(x, w, y, T, K, N);
  } else if (T == 1) {
    gemv_vec_kernel<W, 1><<<blocks, kWarps * 32, 0, s>>>(x, w, y, T, K, N);
  } else {
    const unsigned row_blocks = static_cast<unsigned>((N + kWarps * kRows - 1) / (kWarps * kRows));
    gemv_rows_kernel<W><<<row_blocks, kWarps * 32, 0, s>>>(x, w, y, T, K, N);
  }
}

__global__ void split_bf16x3_kernel(const float* x, __nv_bfloat16* parts, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = x[i];
    const __nv_bfloat16 hi = __float2bfloat16_rn(v);
    const float r1 = __fsub_rn(v, __bfloat162float(hi));  // exact: v and hi share the top bits
    const __nv_bfloat16 mid = __float2bfloat16_rn(r1);
    const float r2 = __fsub_rn(r1, __bfloat162float(mid));
    parts[i] = hi, parts[n + i] = mid, parts[2 * n + i] = __float2bfloat16_rn(r2);
  }
}

__global__ void sum3_kernel(const float* parts, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = __fadd_rn(__fadd_rn(parts[2 * n + i], parts[n + i]), parts[i]);
}

}  // namespace

void split_bf16x3(const float* x, void* parts, int64_t n, cudaStream_t s) {
  if (n > 0) split_bf16x3_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, static_cast<__nv_bfloat16*>(parts), n);
}

void sum3(const float* parts, float* y, int64_t n, cudaStream_t s) {
  if (n > 0) sum3_kernel<<<grid_for(n, 256), 256, 0, s>>>(parts, y, n);
}

void gemv(const float* x, const void* w, ElemType type, float* y, int64_t T, int64_t K, int64_t N, cudaStream_t s) {
  if (T == 0 || N == 0) return;
  switch (type) {
    case ElemType::f16: launch_gemv(x, static_cast<const __half*>(w), y, T, K, N, s); break;
    case ElemType::bf16: launch_gemv(x, static_cast<const __nv_bfloat16*>(w), y, T, K, N, s); break;
    default: launch_gemv(x, static_cast<const float*>(w), y, T, K, N, s); break;
  }
}

}  // namespace kapitsa::ops::cuda::kernels
