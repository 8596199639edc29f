// The cpu backend's table: every op of op_list.inc, pointing at the functions of this folder.
#include "ops/backend.h"
#include "ops/cpu/cpu.h"

namespace kapitsa::ops::cpu {

const BackendTable* backend() {
  static const BackendTable table = [] {
    BackendTable t{"cpu", Device::cpu};
#define KAPITSA_OP(op) t.op = &cpu::op;
#include "ops/op_names.inc"
#undef KAPITSA_OP
    return t;
  }();
  return &table;
}

}  // namespace kapitsa::ops::cpu
