// The op vocabulary: the narrow waist between model code and backends. Model code calls only these.
// Each op is declared once (op_list.inc) and implemented by every backend under the same name:
//   ops/ref  plain scalar C++, the oracle;   ops/cpu  SIMD + threads.
// The functions here dispatch to the selected backend (default cpu; KAPITSA_BACKEND=ref or
// set_backend() selects the oracle, e.g. to debug a model against it).
//
// Conventions for every op: activations are F32 and contiguous, row-major, shapes as commented;
// weights of matmul / embedding are a Linear (tensor/linear.h: dense f32/f16/bf16 used in place,
// quantized formats later; a Tensor converts implicitly to a dense Linear); small
// parameter vectors (norm weights, biases, A_log, ...) are F32 (models convert them at load).
// Outputs are written, never accumulated into, unless the op says so. In-place is allowed only
// where the comment says so.
#pragma once

#include "tensor/linear.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <span>

namespace kapitsa::ops {

enum class Backend { ref, cpu };
Backend backend();
void set_backend(Backend b);

#include "ops/op_list.inc"

}  // namespace kapitsa::ops
