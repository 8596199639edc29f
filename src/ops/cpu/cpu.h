// The CPU backend: SIMD (AVX2 / AVX-512 where compiled for, portable C++ otherwise) and threads from
// base/thread_pool. Same functions as ops/ref, file for file; tests compare the two on random inputs.
#pragma once

#include "tensor/linear.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <span>

namespace kapitsa::ops::cpu {
#include "ops/op_list.inc"
}  // namespace kapitsa::ops::cpu
