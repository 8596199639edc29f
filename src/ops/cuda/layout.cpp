// CUDA data-movement ops: embedding (a kernel), copy (cudaMemcpy, or a conversion kernel between
// f32/f16/bf16), and split/concat of column blocks (one copy_columns kernel for up to eight blocks).
// Embedding ids are checked against the vocabulary on the host, where they arrive.
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"

namespace kapitsa::ops::cuda {
using detail::check;
using detail::check_launch;
using detail::check_on_device;
using detail::elem_type;
using detail::is_weight_dtype;
using detail::rows_of;
using detail::stream;

namespace {
// out: [T, H] f32 for T ids, each in [0, V): checked on the host, where the ids arrive; the ids copied to
// the device.
const int32_t* device_ids(std::span<const int32_t> ids, int64_t V, int64_t H, const Tensor& out) {
  detail::check_f32(out, "embedding", "out");
  const int64_t T = static_cast<int64_t>(ids.size());
  KAPITSA_CHECK(out.numel() == T * H && out.dim(-1) == H, "embedding: out {} for {} ids of width {}", out.shape().str(), T,
                H);
  for (int64_t t = 0; t < T; ++t)
    KAPITSA_CHECK(0 <= ids[static_cast<size_t>(t)] && ids[static_cast<size_t>(t)] < V,
                  "embedding: id {} at {} outside vocabulary of {}", ids[static_cast<size_t>(t)], t, V);
  return detail::upload(ids, detail::Slot::span0);
}
}  // namespace

// table: [V, H] f32|f16|bf16, MLX affine or llama.cpp blocks (rows dequantized straight into out);
// out: [T, H] f32.
void embedding(const Linear& linear, std::span<const int32_t> ids, const Tensor& out) {
  const int64_t T = static_cast<int64_t>(ids.size());
  if (linear.format() == WeightFormat::affine) {
    const kernels::AffineArgs a = detail::affine_args(linear, "embedding");
    kernels::dequantize_affine(a, device_ids(ids, linear.rows(), linear.cols(), out), out.f32(), kernels::DequantOut::f32, T,
                              stream());
    check_launch("embedding (affine)");
    return;
  }
  if (linear.format() == WeightFormat::ggml) {
    const kernels::GgmlArgs a = detail::ggml_args(linear, "embedding");
    kernels::dequantize_ggml(a, device_ids(ids, linear.rows(), linear.cols(), out), out.f32(), kernels::DequantOut::f32, T,
                            stream());
    check_launch("embedding (ggml)");
    return;
  }
  const Tensor& table = linear.dense("embedding");
  KAPITSA_CHECK(table.rank() == 2 && is_weight_dtype(table.dtype()), "embedding: table {} {} must be [V, H] f32|f16|bf16",
                dtype_name(table.dtype()), table.shape().str());
  check_on_device(table, "embedding", "table");
  const int32_t* d_ids = device_ids(ids, table.dim(0), table.dim(1), out);
  kernels::embedding(table.data(), elem_type(table.dtype()), d_ids, out.f32(), T, table.dim(1), stream());
  check_launch("embedding");
}

// Same element count; equal dtypes copy bytes, f32/f16/bf16 pairs convert.
void copy(const Tensor& src, const Tensor& dst) {
  KAPITSA_CHECK(src.numel() == dst.numel(), "copy: {} elements into {}", src.shape().str(), dst.shape().str());
  check_on_device(src, "copy", "src"), check_on_device(dst, "copy", "dst");
  if (src.dtype() == dst.dtype()) {
    if (src.nbytes() > 0 && src.data() != dst.data())
      check(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, stream()), "copy");
    return;
  }
  KAPITSA_CHECK(is_weight_dtype(src.dtype()) && is_weight_dtype(dst.dtype()), "copy: cannot convert {} to {}",
                dtype_name(src.dtype()), dtype_name(dst.dtype()));
  kernels::convert(src.data(), elem_type(src.dtype()), dst.data(), elem_type(dst.dtype()), src.numel(), stream());
  check_launch("copy");
}

namespace {
// Column blocks between row-major 2-D layouts, kernels::kMaxColumnCopies a launch: add() each block
// (src_width / dst_width: the layouts' widths, cols: the block's; elements of es bytes), then flush().
struct ColumnBlocks {
  int64_t R;
  size_t es;
  const char* op;
  kernels::ColumnCopies c;
  void add(const void* src, int64_t src_width, void* dst, int64_t dst_width, int64_t cols) {
    if (cols == 0) return;
    const int i = c.n++;
    c.src[i] = static_cast<const uint8_t*>(src), c.dst[i] = static_cast<uint8_t*>(dst);
    c.src_pitch[i] = src_width * static_cast<int64_t>(es), c.dst_pitch[i] = dst_width * static_cast<int64_t>(es);
    c.width[i] = cols * static_cast<int64_t>(es);
    if (c.n == kernels::kMaxColumnCopies) flush();
  }
  void flush() {
    kernels::copy_columns(c, R, stream());
    check_launch(op);
    c.n = 0;
  }
};
}  // namespace

// x: [R, Σ C_i];  outs[i]: [R, C_i].
void split_columns(const Tensor& x, std::span<const Tensor> outs) {
  const int64_t R = rows_of(x), W = x.dim(-1);
  const size_t es = dtype_size(x.dtype());
  check_on_device(x, "split_columns", "x");
  int64_t offset = 0;
  for (const Tensor& o : outs) {
    KAPITSA_CHECK(o.dtype() == x.dtype() && rows_of(o) == R, "split_columns: out {} {} vs x {} {}", dtype_name(o.dtype()),
                  o.shape().str(), dtype_name(x.dtype()), x.shape().str());
    check_on_device(o, "split_columns", "out");
    offset += o.dim(-1);
  }
  KAPITSA_CHECK(offset == W, "split_columns: outs have {} columns in all, x has {}", offset, W);
  offset = 0;
  ColumnBlocks blocks{R, es, "split_columns", {}};
  for (const Tensor& o : outs) {
    blocks.add(static_cast<const uint8_t*>(x.data()) + static_cast<size_t>(offset) * es, W, o.data(), o.dim(-1), o.dim(-1));
    offset += o.dim(-1);
  }
  blocks.flush();
}

// ins[i]: [R, C_i];  y: [R, Σ C_i].
void concat_columns(std::span<const Tensor> ins, const Tensor& y) {
  const int64_t R = rows_of(y), W = y.dim(-1);
  const size_t es = dtype_size(y.dtype());
  check_on_device(y, "concat_columns", "y");
  int64_t offset = 0;
  for (const Tensor& in : ins) {
    KAPITSA_CHECK(in.dtype() == y.dtype() && rows_of(in) == R, "concat_columns: in {} {} vs y {} {}",
                  dtype_name(in.dtype()), in.shape().str(), dtype_name(y.dtype()), y.shape().str());
    check_on_device(in, "concat_columns", "in");
    offset += in.dim(-1);
  }
  KAPITSA_CHECK(offset == W, "concat_columns: ins have {} columns in all, y has {}", offset, W);
  offset = 0;
  ColumnBlocks blocks{R, es, "concat_columns", {}};
  for (const Tensor& in : ins) {
    blocks.add(in.data(), in.dim(-1), static_cast<uint8_t*>(y.data()) + static_cast<size_t>(offset) * es, W, in.dim(-1));
    offset += in.dim(-1);
  }
  blocks.flush();
}

}  // namespace kapitsa::ops::cuda
