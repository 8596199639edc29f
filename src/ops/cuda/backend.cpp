// The cuda backend's table: every op of op_list.inc, pointing at the functions of this folder, with
// Device::cuda (every tensor argument must live on the GPU, see device_buffer.h). nullptr when no usable
// GPU is present at run time, so a CUDA build runs unchanged on a machine without one.
#include "ops/backend.h"
#include "ops/cuda/cuda.h"

namespace kapitsa::ops::cuda {

const BackendTable* backend() {
  static const BackendTable* table = []() -> const BackendTable* {
    if (!device_available()) return nullptr;
    static BackendTable t{"cuda", Device::cuda};
#define KAPITSA_OP(op) t.op = &cuda::op;
#include "ops/op_names.inc"
#undef KAPITSA_OP
    t.matmul_invariant_rows = &cuda::matmul_invariant_rows;
    return &t;
  }();
  return table;
}

}  // namespace kapitsa::ops::cuda
