// The ref backend's table: every op of op_list.inc, pointing at the functions of this folder.
#include "ops/backend.h"
#include "ops/ref/ref.h"

#include <limits>

namespace kapitsa::ops::ref {

const BackendTable* backend() {
  static const BackendTable table = [] {
    BackendTable t{"ref", Device::cpu};
#define KAPITSA_OP(op) t.op = &ref::op;
#include "ops/op_names.inc"
#undef KAPITSA_OP
    t.matmul_invariant_rows = [](const Linear&) { return std::numeric_limits<int64_t>::max(); };  // row by row
    return t;
  }();
  return &table;
}

}  // namespace kapitsa::ops::ref
