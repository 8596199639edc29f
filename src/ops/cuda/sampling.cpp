// CUDA sampling helpers: argmax_rows (kernel in sampling.cu), writing its ids where the device reads
// them (a chained draft's next step embeds them without a host round trip).
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"

namespace kapitsa::ops::cuda {

// x: [R, V] f32;  out: [R] i32 (checked in ops.cpp).
void argmax_rows(const Tensor& x, int64_t columns, const Tensor& out) {
  kernels::argmax_rows(x.f32(), x.dim(1), columns, out.data_as<int32_t>(), x.dim(0), detail::stream());
  detail::check_launch("argmax_rows");
}

}  // namespace kapitsa::ops::cuda
