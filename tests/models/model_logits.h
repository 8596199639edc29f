// Test helpers for quantized and re-laid-out checkpoints: a model folder's prompt logits, how often
// two sets of logits agree on the top token, and their mean KL divergence.
#pragma once

#include "models/model.h"
#include "tensor/tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

// Share of rows whose argmax agrees with the reference's up to near ties: a row also agrees when the
// reference's logit at a's argmax is within `tie` (nats) of the reference's maximum. A trained model has
// rows where its top two tokens are nearly tied (greedy margins of 0.01–0.1); any rounding flips those,
// so plain top-1 agreement measures how many ties a model happens to have as much as the quantization.
inline constexpr float kNearTie = 0.1f;  // nats: the two tokens' probabilities within 10.5%
inline double top1_agreement_beyond_ties(const Tensor& a, const Tensor& reference, float tie = kNearTie) {
  const int64_t T = a.dim(0), V = a.dim(1);
  int64_t same = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* x = a.data_as<const float>() + t * V;
    const float* y = reference.data_as<const float>() + t * V;
    same += y[std::max_element(x, x + V) - x] >= *std::max_element(y, y + V) - tie;
  }
  return static_cast<double>(same) / static_cast<double>(T);
}

// Mean over positions of KL(p_ref ‖ p) of the softmaxed logits.
inline double mean_kl(const Tensor& logits, const Tensor& reference) {
  const int64_t T = reference.dim(0), V = reference.dim(1);
  double total = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* p = reference.data_as<const float>() + t * V;
    const float* q = logits.data_as<const float>() + t * V;
    const double mp = *std::max_element(p, p + V), mq = *std::max_element(q, q + V);
    double zp = 0, zq = 0;
    for (int64_t v = 0; v < V; ++v) zp += std::exp(p[v] - mp), zq += std::exp(q[v] - mq);
    for (int64_t v = 0; v < V; ++v) {
      const double lp = p[v] - mp - std::log(zp), lq = q[v] - mq - std::log(zq);
      total += std::exp(lp) * (lp - lq);
    }
  }
  return total / static_cast<double>(T);
}

}  // namespace kapitsa::testing
