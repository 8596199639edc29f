// One level's backend table: every op of op_list.inc, pointing at this level's copy of the kernels
// (dispatch.cpp names and hands out the tables).
#include "ops/backend.h"
#include "ops/cpu/level.h"

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {

BackendTable table(std::string_view name) {
  BackendTable t{name, Device::cpu};
#define KAPITSA_OP(op) t.op = &KAPITSA_CPU_LEVEL::op;
#include "ops/op_names.inc"
#undef KAPITSA_OP
  t.matmul_invariant_rows = &KAPITSA_CPU_LEVEL::matmul_invariant_rows;
  return t;
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
