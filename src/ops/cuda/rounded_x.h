// x rounded to int16 by the op before the 4-bit affine GEMV that reads it (affine_gemv.cu, "int16
// kernel"). RMSNorm and residual add + RMSNorm (norm.cpp) write the rounding of their output beside it,
// and the GEMVs right after them (matmul.cpp) launch no rounding kernel of their own: one kernel fewer per
// norm in a decode step (the rounding kernels were ~2 µs each, 276 µs of a 4-bit 4B step: docs/cuda.md).
// Both give the same bits (rounded_x.cuh), so whether a norm rounded changes no result, only speed.
// "Right after" is counted in ops (ops::detail::ops_called: every op of ops.h and byte copy of
// ops/memory.h on this thread): the rounding serves the op right after the norm, and each GEMV that used
// it keeps it for the op after itself (GEMVs only read x); any other op in between, and it is not used.
#pragma once

#include <cstdint>

namespace kapitsa::ops::cuda::detail {

// Device scratch for the rounding of a norm's output [R, D] (the running op's), or null when the norm
// should not round: no GEMV on rounded x has run in this process yet, more rows than those GEMVs take, or
// rows the rounding kernel does not cover (kernels::norm_rounds).
void* rounding_scratch(int64_t R, int64_t D);
// The running op wrote y (numel floats) and, at `rounded`, its rounding.
void rounded_written(const void* y, int64_t numel, void* rounded);
// The rounding of x (numel floats) if the op before the running one wrote it or used it, else null.
const void* rounded_ready(const void* x, int64_t numel);
// A GEMV on x rounded to int16 is about to run (norms start rounding for the next ones).
void rounding_wanted();
// How many times rounded_ready gave a rounding, in this process (for tests).
uint64_t roundings_reused();

}  // namespace kapitsa::ops::cuda::detail
