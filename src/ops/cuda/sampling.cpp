// CUDA sampling helpers: argmax_rows (kernel in sampling.cu), writing its ids where the device reads
// them (a chained draft's next step embeds them without a host round trip).
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"

namespace kapitsa::ops::cuda {

// x: [R, V] f32;  out: [R] i32.
void argmax_rows(const Tensor& x, int64_t columns, const Tensor& out) {
  detail::check_f32(x, "argmax_rows", "x");
  detail::check_on_device(out, "argmax_rows", "out");
  KAPITSA_CHECK(out.dtype() == DType::i32 && x.rank() == 2 && out.numel() == x.dim(0) && columns >= 1 && columns <= x.dim(1),
                "argmax_rows: x {}, {} columns, out {} {}", x.shape().str(), columns, dtype_name(out.dtype()),
                out.shape().str());
  kernels::argmax_rows(x.f32(), x.dim(1), columns, out.data_as<int32_t>(), x.dim(0), detail::stream());
  detail::check_launch("argmax_rows");
}

}  // namespace kapitsa::ops::cuda
