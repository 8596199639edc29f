// Reference data-movement ops: embedding lookup, copy, split/concat of column blocks.
// Every tensor is contiguous row-major; split/concat view tensors as 2-D [rows, last dim].
#include "ops/ref/ref.h"
#include "ops/ref/ref_util.h"

#include <cstring>

namespace kapitsa::ops::ref {
using detail::load;
using detail::rows_of;

// table: [V, H] (any format);  out: [T, H] f32.
void embedding(const Linear& table, std::span<const int32_t> ids, const Tensor& out) {
  const int64_t H = table.cols();
  for (size_t t = 0; t < ids.size(); ++t) dequantize_row(table, ids[t], out.f32() + static_cast<int64_t>(t) * H);
}

// Same element count; equal dtypes copy bytes, f32/f16/bf16 pairs convert (round to nearest even).
void copy(const Tensor& src, const Tensor& dst) {
  if (src.dtype() == dst.dtype()) {
    if (src.nbytes() > 0 && src.data() != dst.data()) std::memmove(dst.data(), src.data(), src.nbytes());
    return;
  }
  for (int64_t i = 0; i < src.numel(); ++i) detail::store(dst, i, load(src, i));
}

// x: [R, Σ C_i];  outs[i]: [R, C_i].
void split_columns(const Tensor& x, std::span<const Tensor> outs) {
  const int64_t R = rows_of(x), W = x.dim(-1);
  const size_t es = dtype_size(x.dtype());
  int64_t offset = 0;
  for (const Tensor& o : outs) {
    const int64_t C = o.dim(-1);
    for (int64_t r = 0; r < R; ++r)
      std::memcpy(static_cast<uint8_t*>(o.data()) + static_cast<size_t>(r * C) * es,
                  static_cast<const uint8_t*>(x.data()) + static_cast<size_t>(r * W + offset) * es,
                  static_cast<size_t>(C) * es);
    offset += C;
  }
}

// ins[i]: [R, C_i];  y: [R, Σ C_i].
void concat_columns(std::span<const Tensor> ins, const Tensor& y) {
  const int64_t R = rows_of(y), W = y.dim(-1);
  const size_t es = dtype_size(y.dtype());
  int64_t offset = 0;
  for (const Tensor& in : ins) {
    const int64_t C = in.dim(-1);
    for (int64_t r = 0; r < R; ++r)
      std::memcpy(static_cast<uint8_t*>(y.data()) + static_cast<size_t>(r * W + offset) * es,
                  static_cast<const uint8_t*>(in.data()) + static_cast<size_t>(r * C) * es,
                  static_cast<size_t>(C) * es);
    offset += C;
  }
}

}  // namespace kapitsa::ops::ref
