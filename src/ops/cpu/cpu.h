// The CPU backend: SIMD (AVX2 / AVX-512 where compiled for, portable C++ otherwise) and threads from
// base/thread_pool. Same functions as ops/ref, file for file; tests compare the two on random inputs.
#pragma once

#include "ops/seq_batch.h"
#include "tensor/linear.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <span>

namespace kapitsa::ops {
struct BackendTable;
}

namespace kapitsa::ops::cpu {
#include "ops/op_list.inc"

// This backend's table (ops/backend.h).
const BackendTable* backend();
}  // namespace kapitsa::ops::cpu
