// CPU data-movement ops: embedding rows widened with SIMD, copies/conversions and column
// split/concat as row-wise memcpy, split across threads when large. No arithmetic: results equal
// ops/ref bit for bit.
#include "base/thread_pool.h"
#include "ops/cpu/affine.h"
#include "ops/cpu/ggml.h"
#include "ops/cpu/level.h"
#include "ops/cpu/simd.h"

#include <algorithm>
#include <cstring>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {
namespace {

template <class WL>
void widen_row(const typename WL::T* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + simd::kW <= n; i += simd::kW) simd::store(dst + i, WL::load(src + i));
  for (; i < n; ++i) dst[i] = WL::scalar(src + i);
}

void widen(DType dt, const void* src, float* dst, int64_t n) {
  switch (dt) {
    case DType::f32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); break;
    case DType::bf16: widen_row<simd::LoadBF16>(static_cast<const uint16_t*>(src), dst, n); break;
    case DType::f16: widen_row<simd::LoadF16>(static_cast<const uint16_t*>(src), dst, n); break;
    default: KAPITSA_CHECK(false, "unsupported dtype {}", dtype_name(dt));
  }
}

size_t row_grain(int64_t row_bytes) { return static_cast<size_t>(std::max<int64_t>(1, (64 << 10) / std::max<int64_t>(row_bytes, 1))); }

// Copies column block [offset, offset + C) between a [R, W] matrix and a [R, C] one.
void copy_columns(const Tensor& wide, const Tensor& narrow, int64_t offset, bool to_narrow) {
  const int64_t R = narrow.dim(-1) == 0 ? 0 : narrow.numel() / narrow.dim(-1), C = narrow.dim(-1), W = wide.dim(-1);
  const size_t es = dtype_size(wide.dtype());
  auto* wp = static_cast<uint8_t*>(wide.data());
  auto* np = static_cast<uint8_t*>(narrow.data());
  parallel_for(static_cast<size_t>(R), row_grain(C * static_cast<int64_t>(es)), [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) {
      uint8_t* w = wp + (r * static_cast<size_t>(W) + static_cast<size_t>(offset)) * es;
      uint8_t* n = np + r * static_cast<size_t>(C) * es;
      if (to_narrow) std::memcpy(n, w, static_cast<size_t>(C) * es);
      else std::memcpy(w, n, static_cast<size_t>(C) * es);
    }
  });
}

}  // namespace

// table: [V, H] f32|f16|bf16;  out: [T, H] f32.
void embedding(const Linear& linear, std::span<const int32_t> ids, const Tensor& out) {
  if (linear.format() == WeightFormat::affine) return embedding_affine(linear, ids, out);
  if (linear.format() == WeightFormat::ggml) return embedding_ggml(linear, ids, out);
  const Tensor& table = linear.dense("embedding");
  const int64_t H = table.dim(1), T = static_cast<int64_t>(ids.size());
  const size_t es = dtype_size(table.dtype());
  float* o = out.f32();
  parallel_for(static_cast<size_t>(T), row_grain(H * 4), [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) {
      const int64_t id = ids[t];
      widen(table.dtype(), static_cast<const uint8_t*>(table.data()) + static_cast<size_t>(id * H) * es,
            o + static_cast<int64_t>(t) * H, H);
    }
  });
}

// Same element count; equal dtypes copy bytes, f32/f16/bf16 pairs convert (round to nearest even).
void copy(const Tensor& src, const Tensor& dst) {
  const int64_t n = src.numel();
  if (n == 0 || src.data() == dst.data()) return;
  if (src.dtype() == dst.dtype()) {
    std::memmove(dst.data(), src.data(), src.nbytes());
    return;
  }
  if (dst.dtype() == DType::f32) {
    parallel_for(static_cast<size_t>(n), 1 << 16, [&](size_t b, size_t e) {
      widen(src.dtype(), static_cast<const uint16_t*>(src.data()) + b, dst.f32() + b, static_cast<int64_t>(e - b));
    });
    return;
  }
  // Narrowing (or f16 <-> bf16): through f32, scalar (rare; KV or state conversions).
  parallel_for(static_cast<size_t>(n), 1 << 16, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      float v = src.dtype() == DType::f32    ? src.data_as<const float>()[i]
                : src.dtype() == DType::bf16 ? bf16_to_f32(src.data_as<const uint16_t>()[i])
                                             : f16_to_f32(src.data_as<const uint16_t>()[i]);
      dst.data_as<uint16_t>()[i] = dst.dtype() == DType::bf16 ? f32_to_bf16(v) : f32_to_f16(v);
    }
  });
}

// x: [R, Σ C_i];  outs[i]: [R, C_i].
void split_columns(const Tensor& x, std::span<const Tensor> outs) {
  int64_t offset = 0;
  for (const Tensor& o : outs) {
    copy_columns(x, o, offset, true);
    offset += o.dim(-1);
  }
}

// ins[i]: [R, C_i];  y: [R, Σ C_i].
void concat_columns(std::span<const Tensor> ins, const Tensor& y) {
  int64_t offset = 0;
  for (const Tensor& in : ins) {
    copy_columns(y, in, offset, false);
    offset += in.dim(-1);
  }
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
