// BackendTable: one backend = a name, the Device its tensors live on, and a pointer per op of
// op_list.inc. The functions in ops.h check their arguments once (ops.cpp) and call the selected
// table's entry: one indirect call. Kernels may assume checked arguments (shapes, dtypes, device).
//
// Adding a backend (cuda, metal):
//   1. src/ops/<name>/: the kernels, same file names as ops/ref, in namespace kapitsa::ops::<name>,
//      declared by including op_list.inc there (as ref.h and cpu.h do).
//   2. `const BackendTable* <name>::backend();` that fills its table (see ops/cpu/backend.cpp: every
//      op, by expanding op_names.inc), or entry by hand (one left null fails with "op X is not
//      implemented by backend Y"); it may return nullptr when the device is absent at run time.
//   3. One line in backends() (ops/backends.cpp), under the build flag that compiles the folder.
// The op tests (tests/ops) then run every op on it against ref with no new test code.
#pragma once

#include "ops/ops.h"

#include <string_view>

namespace kapitsa::ops {

struct BackendTable {
  std::string_view name;  // "ref", "cpu", "cuda": what KAPITSA_BACKEND and find_backend take
  Device device;          // every tensor argument must live here (checked in front of the table)
#define KAPITSA_OP(op) decltype(&kapitsa::ops::op) op = nullptr;
#include "ops/op_names.inc"
#undef KAPITSA_OP
  // Not an op: what ops::matmul_invariant_rows answers for this backend's kernels (required).
  int64_t (*matmul_invariant_rows)(const Linear& w) = nullptr;
};

}  // namespace kapitsa::ops
