// RoPE frequency tables. transformers computes inv_freq = 1 / theta^(2i/rotary_dim) in float32 and
// keeps it as a module buffer, which takes the checkpoint's dtype when a bf16 checkpoint is loaded:
// the frequencies the reference (and every transformers user) actually rotates by are rounded to
// bf16. Matching that is worth ~1e-4 in logits; see docs/decisions.md ("RoPE frequencies").
#pragma once

#include <cmath>
#include <vector>

#include "tensor/dtype.h"

namespace kapitsa::models {

// inv_freq: [rotary_dim / 2], float32 steps as transformers, optionally rounded through bf16.
inline std::vector<float> rope_inv_freq(int rotary_dim, float theta, bool round_to_bf16) {
  std::vector<float> inv_freq(static_cast<size_t>(rotary_dim / 2));
  for (int i = 0; i < rotary_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    float f = 1.0f / static_cast<float>(std::pow(static_cast<double>(theta), static_cast<double>(exponent)));
    if (round_to_bf16) f = bf16_to_f32(f32_to_bf16(f));
    inv_freq[static_cast<size_t>(i)] = f;
  }
  return inv_freq;
}

}  // namespace kapitsa::models
