// MLX affine quantization of one matrix, computed as mlx's CPU `quantize` does it
// (mlx/backend/cpu/quantized.cpp, read, not copied), so that `kapitsa quantize` writes what mlx-lm
// would. Per group of `group_size` consecutive inputs of a row, with n = 2^bits − 1, in f32:
//   scale = max((max − min) / n, 1e-7); the edge is the extreme of larger magnitude: min (scale kept
//   positive) when |min| > |max|, else max (scale negated); q0 = rint(edge / scale); when q0 ≠ 0,
//   scale = edge / q0 and bias = edge (so that 0 is exactly scale·(−q0) + bias), else bias = 0;
//   code q = clamp(rint((w − bias) / scale), 0, n).
// Scales and biases are stored in the weight's dtype (rounded after the codes were chosen, as mlx
// does); codes packed as WeightFormat::affine says (tensor/linear.h).
#pragma once

#include "base/status.h"
#include "tensor/tensor.h"

namespace kapitsa::models {

struct AffineGroupParams {
  float scale = 0;
  float bias = 0;
};

// The scale and bias of one group w[0, group_size) (f32 values).
AffineGroupParams affine_group_params(const float* w, int group_size, int bits);

struct AffineQuantized {
  Buffer codes;   // u32 [.., N, K·bits/32]
  Buffer scales;  // w's dtype [.., N, K/group_size]
  Buffer biases;  // same
};

// w: [.., N, K] f32 | f16 | bf16 on the CPU, K a multiple of group_size. Errors: unsupported bits or
// group size, another dtype, K not a multiple of the group size. Rows run on the thread pool.
Expected<AffineQuantized> affine_quantize(const Tensor& w, int bits, int group_size);

}  // namespace kapitsa::models
