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

// Not an op: row n of a matmul weight / embedding table of any format as f32 (the formats' definitions,
// dequantize.cpp), what ref's matmul and embedding read.  out: [w.cols()].
void dequantize_row(const Linear& w, int64_t n, float* out);
// K values of llama.cpp blocks of a supported `type` (dequantize_ggml.cpp).  blocks: K/block_size blocks.
void dequantize_ggml(GgmlType type, const uint8_t* blocks, int64_t K, float* out);
}  // namespace kapitsa::ops::ref
