// Writes tensors to a .safetensors file (for `kapitsa logits --out`, random checkpoints, tests).
// The header is padded to a multiple of 8 bytes and tensors are stored in the order given.
#pragma once

#include "base/status.h"
#include "tensor/tensor.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kapitsa::weights {

struct NamedTensor {
  std::string name;
  Tensor tensor;  // CPU memory, contiguous
};

Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace kapitsa::weights
