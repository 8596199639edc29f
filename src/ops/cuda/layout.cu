// Kernels of the data-movement ops: embedding rows widened to f32, dtype conversion (f32/f16/bf16,
// round to nearest even when narrowing, as the host conversions), and column blocks (split/concat) in
// one launch. Plain copies need no kernel (cudaMemcpyAsync in layout.cpp).
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

// Block (x, row, copy): 4-byte words of one row of one column block when every pointer, pitch and width
// is a multiple of 4 (the f32 activations' case), else bytes.
__global__ void copy_columns_kernel(ColumnCopies c, int64_t row0, bool words) {
  pdl_trigger();
  pdl_wait();
  const int i = blockIdx.z;
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  int64_t width = 0;
#pragma unroll
  for (int j = 0; j < kMaxColumnCopies; ++j)  // constant indices: a dynamic one would copy c to local memory
    if (j == i) {
      const int64_t r = row0 + blockIdx.y;
      src = c.src[j] + r * c.src_pitch[j], dst = c.dst[j] + r * c.dst_pitch[j], width = c.width[j];
    }
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x, stride = int64_t{gridDim.x} * blockDim.x;
  if (words) {
    for (int64_t k = first; k < width / 4; k += stride)
      reinterpret_cast<uint32_t*>(dst)[k] = reinterpret_cast<const uint32_t*>(src)[k];
  } else {
    for (int64_t k = first; k < width; k += stride) dst[k] = src[k];
  }
}

}  // namespace

void copy_columns(const ColumnCopies& c, int64_t R, cudaStream_t s) {
  if (R == 0 || c.n == 0) return;
  int64_t widest = 0;
  bool words = true;
  for (int i = 0; i < c.n; ++i) {
    widest = widest > c.width[i] ? widest : c.width[i];
    words = words && (reinterpret_cast<uintptr_t>(c.src[i]) | reinterpret_cast<uintptr_t>(c.dst[i]) | c.src_pitch[i] |
                      c.dst_pitch[i] | c.width[i]) % 4 == 0;
  }
  if (widest == 0) return;
  const unsigned x_blocks = grid_for(words ? widest / 4 : widest, kThreads);
  for (int64_t r0 = 0; r0 < R; r0 += 65535) {  // gridDim.y is at most 65535
    const int64_t n = R - r0 < 65535 ? R - r0 : 65535;
    launch(copy_columns_kernel, dim3(x_blocks, static_cast<unsigned>(n), static_cast<unsigned>(c.n)), kThreads, s, c, r0,
           words);
  }
}

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
