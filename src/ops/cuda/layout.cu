// Kernels of the data-movement ops: embedding rows widened to f32, and dtype conversion (f32/f16/bf16,
// round to nearest even when narrowing, as the host conversions). Plain copies and column splits need
// no kernel (cudaMemcpy2DAsync in layout.cpp).
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kThreads = 256;

// One block row per token: out[t, h] = table[ids[t], h].
__global__ void embedding_kernel(const void* table, ElemType type, const int32_t* ids, float* out, int64_t H) {
  pdl_trigger();
  pdl_wait();
  const int64_t t = blockIdx.y;
  const int64_t row = ids[t];
  for (int64_t h = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; h < H; h += int64_t{gridDim.x} * blockDim.x)
    out[t * H + h] = load_as_float(table, type, row * H + h);
}

__global__ void convert_kernel(const void* src, ElemType src_type, void* dst, ElemType dst_type, int64_t n) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = load_as_float(src, src_type, i);
    switch (dst_type) {
      case ElemType::f16: static_cast<__half*>(dst)[i] = __float2half_rn(v); break;
      case ElemType::bf16: static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(v); break;
      default: static_cast<float*>(dst)[i] = v; break;
    }
  }
}

}  // namespace

void embedding(const void* table, ElemType type, const int32_t* ids, float* out, int64_t T, int64_t H, cudaStream_t s) {
  if (T == 0 || H == 0) return;
  const unsigned x_blocks = static_cast<unsigned>((H + kThreads - 1) / kThreads);
  for (int64_t t0 = 0; t0 < T; t0 += 65535) {  // gridDim.y is at most 65535
    const int64_t n = T - t0 < 65535 ? T - t0 : 65535;
    launch(embedding_kernel, dim3(x_blocks, static_cast<unsigned>(n)), kThreads, s, table, type, ids + t0, out + t0 * H, H);
  }
}

void convert(const void* src, ElemType src_type, void* dst, ElemType dst_type, int64_t n, cudaStream_t s) {
  if (n > 0) launch(convert_kernel, grid_for(n, kThreads), kThreads, s, src, src_type, dst, dst_type, n);
}

}  // namespace kapitsa::ops::cuda::kernels
