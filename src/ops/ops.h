// The op vocabulary: the narrow waist between model code and backends. Model code calls only these.
// Each op is declared once (op_list.inc); each function here checks its arguments once and calls the
// selected backend's table (ops/backend.h, which also says how to add a backend):
//   ref  plain scalar C++, the oracle;   cpu  SIMD + threads (the default).
// Selection: process-wide by KAPITSA_BACKEND=<name> or set_backend(); per thread by ScopedBackend.
//
// Conventions for every op: activations are F32 and contiguous, row-major, shapes as commented;
// weights of matmul / embedding are a Linear (tensor/linear.h: dense f32/f16/bf16 used in place,
// quantized formats later; made from a Tensor only explicitly, Linear(t)); small
// parameter vectors (norm weights, biases, A_log, ...) are F32 (models convert them at load).
// Outputs are written, never accumulated into, unless the op says so. In-place is allowed only
// where the comment says so.
#pragma once

#include "ops/seq_batch.h"
#include "tensor/linear.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <span>
#include <string_view>

namespace kapitsa::ops {

// ---- backends --------------------------------------------------------------------------------
struct BackendTable;  // ops/backend.h

// Every registered backend, ref (the oracle) first.
std::span<const BackendTable* const> backends();
// The backend registered under `name` ("ref", "cpu", ...), or nullptr.
const BackendTable* find_backend(std::string_view name);
// The backend the ops below run on, on this thread.
const BackendTable& current_backend();
// Process-wide default (threads without a ScopedBackend).
void set_backend(const BackendTable& b);
enum class Backend { ref, cpu };
void set_backend(Backend b);  // the same, by the two host backends' names

// Selects a backend for this thread for the guard's lifetime (nests; restores the previous one).
//   ops::ScopedBackend on(ops::find_backend("ref"));
class ScopedBackend {
 public:
  explicit ScopedBackend(const BackendTable* b);  // b must not be null
  explicit ScopedBackend(const BackendTable& b);
  ~ScopedBackend();
  ScopedBackend(const ScopedBackend&) = delete;
  ScopedBackend& operator=(const ScopedBackend&) = delete;

 private:
  const BackendTable* previous_;
};

// The widest conv1d_causal kernel the backends take (the models use 4).
inline constexpr int64_t kMaxConvWidth = 16;

// The most rows x may have for matmul, matmul_many and matmul_swiglu over w on `device` that still give
// each row exactly the bits it gets alone (batch-invariant: a speculative verification or a decode batch
// of that many rows then gives a sequence the logits of plain decoding); 0: no claim past one row. On
// the cpu device the current backend's answer. The op tests check each backend's claim at that count.
int64_t matmul_invariant_rows(Device device, const Linear& w);

// ---- the ops -----------------------------------------------------------------------------------
#include "ops/op_list.inc"

}  // namespace kapitsa::ops
