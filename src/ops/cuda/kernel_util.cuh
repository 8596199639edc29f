// Internal to ops/cuda's .cu files: reading f32/f16/bf16 elements as float, warp and block sums, grid
// sizing, and a sequence's rows and slots in a batch (Seqs). Device code only; no host headers of the project.
#pragma once

#include "ops/cuda/kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>
#include <utility>

namespace kapitsa::ops::cuda::kernels {

// Programmatic dependent launch (Hopper): a kernel queued with launch() may start while the kernel
// before it on the stream is still running (its blocks then wait in pdl_wait()), so its launch, its
// blocks' start and whatever it reads that no kernel writes (weights) overlap the previous kernel's
// tail. Such a kernel must call pdl_wait() before it reads anything an earlier kernel wrote and before
// it writes anything (an earlier kernel may still read it): pdl_wait() returns once every earlier kernel
// has completed and its writes are visible. pdl_trigger() lets the next kernel start before this one
// ends. Both are no-ops for a kernel launched plainly (<<<>>>) or without PDL (pdl_enabled() false).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// kernel<<<grid, block, 0, s>>>(args...) with programmatic stream serialization allowed when
// pdl_enabled(): only for kernels that call pdl_wait() as above.
template <typename... P, typename... A>
void launch_smem(void (*kernel)(P...), dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t s, A&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = dynamic_smem, cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr, cfg.numAttrs = pdl_enabled() ? 1 : 0;
  cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);  // an error is left for check_launch
}
template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, cudaStream_t s, A&&... args) {
  launch_smem(kernel, grid, block, 0, s, std::forward<A>(args)...);
}

__device__ __forceinline__ float load_as_float(const void* p, ElemType t, int64_t i) {
  switch (t) {
    case ElemType::f16: return __half2float(static_cast<const __half*>(p)[i]);
    case ElemType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// acc[a][b] = Σ_x X[ti + 16a, x] · Y[tj + 16b, x] for x < D: a 4×4 tile of X Yᵀ, both in shared memory
// (rows of stride `stride`, odd, so the 16 rows a warp reads at once sit in distinct banks): 8 loads
// serve 16 products. The chunked scans' prep kernels, 256 threads as ti = tid / 16, tj = tid % 16.
__device__ __forceinline__ void dot_tile(const float* X, const float* Y, int stride, int D, int ti, int tj, float (&acc)[4][4]) {
#pragma unroll
  for (int p = 0; p < 4; ++p)
#pragma unroll
    for (int q = 0; q < 4; ++q) acc[p][q] = 0.0f;
  for (int x = 0; x < D; ++x) {
    float xr[4], yr[4];
#pragma unroll
    for (int p = 0; p < 4; ++p) xr[p] = X[(ti + 16 * p) * stride + x], yr[p] = Y[(tj + 16 * p) * stride + x];
#pragma unroll
    for (int p = 0; p < 4; ++p)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[p][q] += xr[p] * yr[q];
  }
}


// f(i, j, acc[a][b]) for each (i, j) = (ti + 16a, tj + 16b) of dot_tile's tile.
template <typename F>
__device__ __forceinline__ void each_in_tile(int ti, int tj, const float (&acc)[4][4], F f) {
#pragma unroll
  for (int p = 0; p < 4; ++p)
#pragma unroll
    for (int q = 0; q < 4; ++q) f(ti + 16 * p, tj + 16 * q, acc[p][q]);
}

// 8 floats → their bf16 hi/lo pair (hi = bf16(v), lo = bf16(v − hi): v to 16 significant bits), each
// plane's 8 values packed into 16 bytes for one store (prefill's dequantized weights, DequantOut::bf16_pair).
__device__ __forceinline__ void bf16_pair8(const float* v, uint4& hi, uint4& lo) {
  uint32_t h[4], l[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __nv_bfloat162 hp = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
    const __nv_bfloat162 lp = __floats2bfloat162_rn(v[2 * j] - __low2float(hp), v[2 * j + 1] - __high2float(hp));
    h[j] = *reinterpret_cast<const uint32_t*>(&hp), l[j] = *reinterpret_cast<const uint32_t*>(&lp);
  }
  hi = make_uint4(h[0], h[1], h[2], h[3]), lo = make_uint4(l[0], l[1], l[2], l[3]);
}

// Sequence i of a batch (kernels.h, Seqs): its rows [r0, r1), its state slot, the first row after
// which the state is also checkpointed (r1 when there are no checkpoints), and where that row's
// checkpoint slot sits in ckpt_slots.
struct SeqRows {
  int64_t r0, r1, slot, ckpt_begin, ckpt0;
};
__device__ __forceinline__ SeqRows seq_rows(const Seqs& s, int64_t i, int64_t T) {
  SeqRows v;
  v.r0 = s.row_offsets != nullptr ? s.row_offsets[i] : 0;
  v.r1 = s.row_offsets != nullptr ? s.row_offsets[i + 1] : T;
  v.slot = s.state_slots != nullptr ? s.state_slots[i] : 0;
  v.ckpt0 = s.ckpt_offsets != nullptr ? s.ckpt_offsets[i] : 0;
  v.ckpt_begin = s.ckpt_offsets != nullptr ? v.r1 - (s.ckpt_offsets[i + 1] - v.ckpt0) : v.r1;
  return v;
}
// The checkpoint slot of the state after row t (t ≥ ckpt_begin) of a sequence: one load (kernels that
// walk tokens load a stage's slots together, ahead of the walk: a load a token in the chain cost about
// a microsecond each).
__device__ __forceinline__ int32_t ckpt_slot(const Seqs& s, const SeqRows& v, int64_t t) {
  return s.ckpt_slots[v.ckpt0 + (t - v.ckpt_begin)];
}

// The largest (v, i) over the warp, ties to the lower i; i < 0: no candidate. Every lane ends with the
// same pair (a total order, reduced by butterfly). Used by the MoE routers.
__device__ __forceinline__ void warp_argmax(double& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const double ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (oi >= 0 && (i < 0 || ov > v || (ov == v && oi < i))) v = ov, i = oi;
  }
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// relu(v)², as relu_squared_kernel and ref's relu_squared compute it (a NaN gives 0).
__device__ __forceinline__ float relu_squared_of(float v) {
  const float r = v > 0.0f ? v : 0.0f;
  return r * r;
}
__device__ __forceinline__ float epilogue(float v, Epilogue act) {
  return act == Epilogue::relu_squared ? relu_squared_of(v) : v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum of v over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
// `shared` holds 32 floats. Contains barriers: every thread of the block must call it.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < n_warps ? shared[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + __expf(-x)); }

// Blocks of `threads` for a grid-stride loop over n elements (capped; the loop covers the rest).
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8);
}

// 16 bytes of a weight row, read once a step: not kept in L1 (x, read by every warp, keeps L1 to itself),
// with a 256-byte L2 prefetch (a warp's load covers 512 contiguous bytes of a row). Used by the one-token
// GEMVs (matmul.cu, affine_gemv.cu's int16 kernel). On an H100, alternating runs of one call against
// __ldg: the 4B shape's bf16 decode 250.4 / 249.6 → 253.9 / 253.4 tok/s (session 30; 254.4 / 253.6
// without the prefetch hint, which did not go through the op tests on a GPU; this one did), its 4-bit
// decode 445.1 / 439.7 → 451.0 / 451.0 (session 32).
__device__ __forceinline__ uint4 load_weights(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// acc += x[k … k + kVec) · the kVec weights (f32, f16 or bf16) in raw, four products a step: the order of
// the dense GEMVs (matmul.cu, the experts' in moe.cu), whatever the rounds of loads around it.
template <typename W>
__device__ __forceinline__ void dot_add(float& acc, const uint4& raw, const float* xk) {
  constexpr int kVec = 16 / sizeof(W);
  const W* v = reinterpret_cast<const W*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec; i += 4) {
    const float4 xv = *reinterpret_cast<const float4*>(xk + i);
    acc += xv.x * to_float(v[i]) + xv.y * to_float(v[i + 1]) + xv.z * to_float(v[i + 2]) + xv.w * to_float(v[i + 3]);
  }
}

}  // namespace kapitsa::ops::cuda::kernels
