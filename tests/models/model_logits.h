// Test helpers for quantized and re-laid-out checkpoints: a model folder's prompt logits, and how
// often two sets of logits agree on the top token.
#pragma once

#include "models/model.h"
#include "tensor/tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>

namespace kapitsa::testing {

// Prompt logits [T, V] of the model in `dir` on the fixture's prompt.
inline Buffer prompt_logits(const std::string& dir, std::span<const int32_t> ids, int64_t* resident = nullptr) {
  auto model = models::load_model(dir);
  EXPECT_TRUE(model.ok()) << (model.ok() ? "" : model.error().message);
  if (!model.ok()) return Buffer();
  const int64_t T = static_cast<int64_t>(ids.size()), V = (*model)->info().vocab_size;
  if (resident) *resident = (*model)->info().resident_weight_bytes;
  auto state = (*model)->new_state(T);
  Buffer logits = Buffer::allocate(DType::f32, {T, V});
  const Status s = (*model)->forward(ids, *state, logits);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return logits;
}

// Share of rows whose argmax agrees.
inline double top1_agreement(const Tensor& a, const Tensor& b) {
  const int64_t T = a.dim(0), V = a.dim(1);
  int64_t same = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* x = a.data_as<const float>() + t * V;
    const float* y = b.data_as<const float>() + t * V;
    same += std::max_element(x, x + V) - x == std::max_element(y, y + V) - y;
  }
  return static_cast<double>(same) / static_cast<double>(T);
}

}  // namespace kapitsa::testing
