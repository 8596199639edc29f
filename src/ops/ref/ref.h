// The reference backend: plain scalar C++ for every op in op_list.inc, written for clarity, not
// speed (f64 accumulation where it costs nothing). The oracle every other backend is tested against.
#pragma once

#include "ops/seq_batch.h"
#include "tensor/linear.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <span>

namespace kapitsa::ops {
struct BackendTable;
}

namespace kapitsa::ops::ref {
#include "ops/op_list.inc"

// This backend's table (ops/backend.h).
const BackendTable* backend();
}  // namespace kapitsa::ops::ref
