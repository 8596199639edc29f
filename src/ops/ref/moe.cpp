// Reference mixture-of-experts plumbing: softmax top-k routing, gathering token rows for an expert,
// scattering weighted expert outputs back (accumulating), and the device-routed pair: each token row
// through its chosen experts (matmul_experts) and the weighted sum of those rows (moe_combine).
#include "ops/composed/composed.h"
#include "ops/ref/ref.h"
#include "ops/ref/ref_util.h"

#include <cmath>
#include <vector>

namespace kapitsa::ops::ref {

// logits: [T, E];  expert_ids: [T, k] i32;  expert_weights: [T, k] f32.
void moe_route_softmax(const Tensor& logits, int k, bool renormalize, const Tensor& expert_ids,
                       const Tensor& expert_weights) {
  const int64_t E = logits.dim(-1), T = detail::rows_of(logits);
  const float* pl = logits.f32();
  int32_t* ids = expert_ids.data_as<int32_t>();
  float* ws = expert_weights.f32();
  std::vector<double> p(static_cast<size_t>(E));
  std::vector<bool> taken(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* row = pl + t * E;
    double m = -INFINITY, sum = 0;
    for (int64_t e = 0; e < E; ++e) m = std::max(m, static_cast<double>(row[e]));
    for (int64_t e = 0; e < E; ++e) sum += (p[static_cast<size_t>(e)] = std::exp(row[e] - m));
    for (auto& x : p) x /= sum;
    std::fill(taken.begin(), taken.end(), false);
    double chosen_sum = 0;
    for (int j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e)  // strict > keeps the lower index on ties
        if (!taken[static_cast<size_t>(e)] && (best < 0 || p[static_cast<size_t>(e)] > p[static_cast<size_t>(best)]))
          best = e;
      taken[static_cast<size_t>(best)] = true;
      ids[t * k + j] = static_cast<int32_t>(best);
      ws[t * k + j] = static_cast<float>(p[static_cast<size_t>(best)]);
      chosen_sum += p[static_cast<size_t>(best)];
    }
    if (renormalize)
      for (int j = 0; j < k; ++j)
        ws[t * k + j] = static_cast<float>(p[static_cast<size_t>(ids[t * k + j])] / chosen_sum);
  }
}

// x: [T, H];  out: [R, H];  rows: [R].
void gather_rows(const Tensor& x, std::span<const int32_t> rows, const Tensor& out) {
  const int64_t H = x.dim(-1), R = static_cast<int64_t>(rows.size());
  for (int64_t r = 0; r < R; ++r) {
    const int64_t src = rows[static_cast<size_t>(r)];
    for (int64_t h = 0; h < H; ++h) out.f32()[r * H + h] = x.f32()[src * H + h];
  }
}

// src: [R, H];  dst: [T, H];  rows, weights: [R].
void scale_add_rows(const Tensor& src, std::span<const int32_t> rows, std::span<const float> weights,
                    const Tensor& dst) {
  const int64_t H = dst.dim(-1), R = static_cast<int64_t>(rows.size());
  for (int64_t r = 0; r < R; ++r) {
    const int64_t d = rows[static_cast<size_t>(r)];
    const float wr = weights[static_cast<size_t>(r)];
    for (int64_t h = 0; h < H; ++h) dst.f32()[d * H + h] += wr * src.f32()[r * H + h];
  }
}

// x: [T, K];  experts[e]: [N, K];  expert_ids: [T, k];  y: [T·k, N]. One ref matmul per (token, choice).
void matmul_experts(const Tensor& x, std::span<const Linear> experts, const Tensor& expert_ids, const Tensor& y) {
  const int64_t T = expert_ids.dim(0), k = expert_ids.dim(1);
  const int32_t* ids = expert_ids.data_as<const int32_t>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j)
      matmul(x.rows(t, t + 1), experts[static_cast<size_t>(ids[t * k + j])], y.rows(t * k + j, t * k + j + 1));
}

void matmul_experts_relu_squared(const Tensor& x, std::span<const Linear> experts, const Tensor& expert_ids,
                                 const Tensor& y) {
  composed::matmul_experts_relu_squared(*backend(), x, experts, expert_ids, y);
}

// y: [T·k, H];  expert_weights: [T, k];  addend: [T, H] or empty;  out: [T, H] (may be the addend).
void moe_combine(const Tensor& y, const Tensor& expert_weights, const Tensor& addend, const Tensor& out) {
  const int64_t T = expert_weights.dim(0), k = expert_weights.dim(1), H = out.dim(-1);
  const float* w = expert_weights.f32();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) acc += w[t * k + j] * y.f32()[(t * k + j) * H + h];
      if (!addend.empty()) acc += addend.f32()[t * H + h];
      out.f32()[t * H + h] = acc;
    }
}

}  // namespace kapitsa::ops::ref
