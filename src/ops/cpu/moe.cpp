// CPU mixture-of-experts plumbing: softmax top-k routing (tokens in parallel; selection on the logits,
// which order the experts exactly as the probabilities do, ties to the lower index), row gather, and
// the weighted scatter-add (split by columns, so repeated destination rows never race), and the
// device-routed pair (matmul_experts: this backend's matmul per token and choice; moe_combine).
#include "base/thread_pool.h"
#include "ops/composed/composed.h"
#include "ops/cpu/level.h"
#include "ops/cpu/simd.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {

// logits: [T, E];  expert_ids: [T, k] i32;  expert_weights: [T, k] f32.
void moe_route_softmax(const Tensor& logits, int k, bool renormalize, const Tensor& expert_ids,
                       const Tensor& expert_weights) {
  const int64_t E = logits.dim(-1), T = E == 0 ? 0 : logits.numel() / E;
  const float* pl = logits.f32();
  int32_t* ids = expert_ids.data_as<int32_t>();
  float* ws = expert_weights.f32();
  parallel_for(static_cast<size_t>(T), 16, [&](size_t begin, size_t end) {
    std::vector<int32_t> order(static_cast<size_t>(E));
    for (size_t t = begin; t < end; ++t) {
      const float* row = pl + static_cast<int64_t>(t) * E;
      float m = row[0];
      for (int64_t e = 1; e < E; ++e) m = std::max(m, row[e]);
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += std::exp(static_cast<double>(row[e]) - m);
      for (int64_t e = 0; e < E; ++e) order[static_cast<size_t>(e)] = static_cast<int32_t>(e);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        return row[a] > row[b] || (row[a] == row[b] && a < b);
      });
      double chosen = 0;
      for (int j = 0; j < k; ++j) chosen += std::exp(static_cast<double>(row[order[static_cast<size_t>(j)]]) - m);
      const double denom = renormalize ? chosen : sum;
      for (int j = 0; j < k; ++j) {
        const int32_t e = order[static_cast<size_t>(j)];
        ids[t * static_cast<size_t>(k) + static_cast<size_t>(j)] = e;
        ws[t * static_cast<size_t>(k) + static_cast<size_t>(j)] =
            static_cast<float>(std::exp(static_cast<double>(row[e]) - m) / denom);
      }
    }
  });
}

// x: [T, H];  out: [R, H];  rows: [R].
void gather_rows(const Tensor& x, std::span<const int32_t> rows, const Tensor& out) {
  const int64_t H = x.dim(-1), R = static_cast<int64_t>(rows.size());
  const float* px = x.f32();
  float* po = out.f32();
  parallel_for(static_cast<size_t>(R), static_cast<size_t>(std::max<int64_t>(1, 16384 / std::max<int64_t>(H, 1))),
               [&](size_t begin, size_t end) {
                 for (size_t r = begin; r < end; ++r) {
                   const int64_t src = rows[r];
                   std::memcpy(po + static_cast<int64_t>(r) * H, px + src * H, static_cast<size_t>(H) * 4);
                 }
               });
}

// src: [R, H];  dst: [T, H];  rows, weights: [R].
void scale_add_rows(const Tensor& src, std::span<const int32_t> rows, std::span<const float> weights,
                    const Tensor& dst) {
  const int64_t H = dst.dim(-1), R = static_cast<int64_t>(rows.size());
  const float* ps = src.f32();
  float* pd = dst.f32();
  // Column blocks of whole vectors: rows are applied in order inside each block, as ops/ref does.
  const int64_t n_blocks = (H + simd::kW - 1) / simd::kW;
  const size_t grain = static_cast<size_t>(std::max<int64_t>(1, 4096 / std::max<int64_t>(R * simd::kW, 1)));
  parallel_for(static_cast<size_t>(n_blocks), grain, [&](size_t begin, size_t end) {
    const int64_t c0 = static_cast<int64_t>(begin) * simd::kW, c1 = std::min(H, static_cast<int64_t>(end) * simd::kW);
    for (int64_t r = 0; r < R; ++r) {
      const float wr = weights[static_cast<size_t>(r)];
      const float* s = ps + r * H;
      float* d = pd + rows[static_cast<size_t>(r)] * H;
      int64_t c = c0;
      for (; c + simd::kW <= c1; c += simd::kW)
        simd::store(d + c, simd::fma(simd::set1(wr), simd::load(s + c), simd::load(d + c)));
      for (; c < c1; ++c) d[c] += wr * s[c];
    }
  });
}

// x: [T, K];  experts[e]: [N, K];  expert_ids: [T, k];  y: [T·k, N]. On the CPU the router's choices
// are already on the host, so models group tokens by expert instead; this serves the same call on any
// device (one threaded GEMV per token and choice).
void matmul_experts(const Tensor& x, std::span<const Linear> experts, const Tensor& expert_ids, const Tensor& y) {
  const int64_t T = expert_ids.dim(0), k = expert_ids.dim(1);
  const int32_t* ids = expert_ids.data_as<const int32_t>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j)
      matmul(x.rows(t, t + 1), experts[static_cast<size_t>(ids[t * k + j])], y.rows(t * k + j, t * k + j + 1));
}

void matmul_experts_relu_squared(const Tensor& x, std::span<const Linear> experts, const Tensor& expert_ids,
                                 const Tensor& y) {
  composed::matmul_experts_relu_squared(*backend_for(Level::KAPITSA_CPU_LEVEL), x, experts, expert_ids, y);
}

// y: [T·k, H];  expert_weights: [T, k];  addend: [T, H] or empty;  out: [T, H] (may be the addend).
// Tokens in parallel, choices summed in j order into a block of columns on the stack (out may be the
// addend, so the sum cannot start in out), then the addend.
void moe_combine(const Tensor& y, const Tensor& expert_weights, const Tensor& addend, const Tensor& out) {
  const int64_t T = expert_weights.dim(0), k = expert_weights.dim(1), H = out.dim(-1);
  const float* w = expert_weights.f32();
  const float* py = y.f32();
  const float* pa = addend.empty() ? nullptr : addend.f32();
  float* po = out.f32();
  constexpr int64_t kBlock = 256;
  parallel_for(static_cast<size_t>(T), 1, [&](size_t begin, size_t end) {
    float acc[kBlock];
    for (int64_t t = static_cast<int64_t>(begin); t < static_cast<int64_t>(end); ++t)
      for (int64_t h0 = 0; h0 < H; h0 += kBlock) {
        const int64_t n = std::min(kBlock, H - h0);
        std::fill(acc, acc + n, 0.0f);
        for (int64_t j = 0; j < k; ++j) {
          const float wj = w[t * k + j];
          const float* s = py + (t * k + j) * H + h0;
          for (int64_t i = 0; i < n; ++i) acc[i] += wj * s[i];
        }
        float* o = po + t * H + h0;
        if (pa == nullptr) std::copy(acc, acc + n, o);
        else
          for (int64_t i = 0; i < n; ++i) o[i] = acc[i] + pa[t * H + h0 + i];
      }
  });
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
