// Reference data-movement ops: embedding lookup, copy, split/concat of column blocks.
// Every tensor is contiguous row-major; split/concat view tensors as 2-D [rows, last dim].
#include "ops/ref/ref.h"
#include "ops/ref/ref_util.h"

#include <cstring>

namespace kapitsa::ops::ref {
using detail::check_f32;
using detail::load;
using detail::rows_of;

// table: [V, H] f32|f16|bf16;  out: [T, H] f32.
void embedding(const Linear& linear, std::span<const int32_t> ids, const Tensor& out) {
  const Tensor& table = linear.dense("embedding");
  KAPITSA_CHECK(table.rank() == 2, "embedding: table must be [V, H], got {}", table.shape().str());
  KAPITSA_CHECK(detail::is_weight_dtype(table.dtype()), "embedding: table dtype {}", dtype_name(table.dtype()));
  check_f32(out, "embedding", "out");
  const int64_t V = table.dim(0), H = table.dim(1), T = static_cast<int64_t>(ids.size());
  KAPITSA_CHECK(out.numel() == T * H && out.dim(-1) == H, "embedding: out {} for {} ids of width {}",
                out.shape().str(), T, H);
  float* o = out.f32();
  for (int64_t t = 0; t < T; ++t) {
    const int64_t id = ids[static_cast<size_t>(t)];
    KAPITSA_CHECK(0 <= id && id < V, "embedding: id {} at {} outside vocabulary of {}", id, t, V);
    for (int64_t h = 0; h < H; ++h) o[t * H + h] = load(table, id * H + h);
  }
}

// Same element count; equal dtypes copy bytes, f32/f16/bf16 pairs convert (round to nearest even).
void copy(const Tensor& src, const Tensor& dst) {
  KAPITSA_CHECK(src.numel() == dst.numel(), "copy: {} elements into {}", src.shape().str(), dst.shape().str());
  if (src.dtype() == dst.dtype()) {
    if (src.nbytes() > 0 && src.data() != dst.data()) std::memmove(dst.data(), src.data(), src.nbytes());
    return;
  }
  KAPITSA_CHECK(detail::is_weight_dtype(src.dtype()) && detail::is_weight_dtype(dst.dtype()),
                "copy: cannot convert {} to {}", dtype_name(src.dtype()), dtype_name(dst.dtype()));
  for (int64_t i = 0; i < src.numel(); ++i) detail::store(dst, i, load(src, i));
}

// x: [R, Σ C_i];  outs[i]: [R, C_i].
void split_columns(const Tensor& x, std::span<const Tensor> outs) {
  const int64_t R = rows_of(x), W = x.dim(-1);
  const size_t es = dtype_size(x.dtype());
  int64_t offset = 0;
  for (const Tensor& o : outs) {
    KAPITSA_CHECK(o.dtype() == x.dtype(), "split_columns: dtype {} vs {}", dtype_name(o.dtype()),
                  dtype_name(x.dtype()));
    KAPITSA_CHECK(rows_of(o) == R, "split_columns: out {} has not the {} rows of x {}", o.shape().str(), R,
                  x.shape().str());
    offset += o.dim(-1);
  }
  KAPITSA_CHECK(offset == W, "split_columns: outs have {} columns in all, x has {}", offset, W);
  offset = 0;
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
    KAPITSA_CHECK(in.dtype() == y.dtype(), "concat_columns: dtype {} vs {}", dtype_name(in.dtype()),
                  dtype_name(y.dtype()));
    KAPITSA_CHECK(rows_of(in) == R, "concat_columns: in {} has not the {} rows of y {}", in.shape().str(), R,
                  y.shape().str());
    offset += in.dim(-1);
  }
  KAPITSA_CHECK(offset == W, "concat_columns: ins have {} columns in all, y has {}", offset, W);
  offset = 0;
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
