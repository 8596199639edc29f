// run_routed_experts (template, included by moe.h): group the tokens by expert (a counting sort into
// workspace arrays, no allocation), gather their rows, run the expert once per group, scatter-add the
// weighted results. On a device the router's choices are copied to the host first (a wait per MoE
// layer: the grouping and the per-expert launches are decided on the host), which models do only for
// batches larger than kDeviceRoutedMaxTokens (prefill); decode batches use route_on_device (moe.h).
#pragma once

#include "models/workspace.h"
#include "ops/memory.h"
#include "ops/ops.h"
#include "ops/step_graph.h"

#include <algorithm>

namespace kapitsa::models {

template <typename ExpertFn>
void run_routed_experts(int64_t n_experts, const Tensor& expert_ids, const Tensor& expert_weights, const Tensor& x,
                        const Tensor& out, Workspace& ws, ExpertFn&& expert) {
  Workspace::Scope scope(ws);
  const int64_t T = expert_ids.dim(0), k = expert_ids.dim(1);
  const int32_t* ids = expert_ids.data_as<const int32_t>();
  const float* weights = expert_weights.f32();
  if (expert_ids.device() != Device::cpu) {
    std::span<int32_t> host_ids = ws.take_span<int32_t>(static_cast<size_t>(T * k));
    std::span<float> host_weights = ws.take_span<float>(static_cast<size_t>(T * k));
    ops::copy_bytes(host_weights.data(), Device::cpu, weights, expert_weights.device(), host_weights.size_bytes(), false);
    ops::copy_bytes(host_ids.data(), Device::cpu, ids, expert_ids.device(), host_ids.size_bytes());
    // A step being captured as a graph copies nothing (the capture is given up and the step then runs
    // eagerly, ops/step_graph.h): the choices are not there to read.
    if (ops::capturing_step(expert_ids.device())) return;
    ids = host_ids.data(), weights = host_weights.data();
  }
  // begin[e] .. begin[e + 1]: expert e's slice of rows / scales, in token order.
  std::span<int64_t> begin = ws.take_span<int64_t>(static_cast<size_t>(n_experts + 1));
  std::span<int64_t> fill = ws.take_span<int64_t>(static_cast<size_t>(n_experts));
  std::span<int32_t> rows = ws.take_span<int32_t>(static_cast<size_t>(T * k));
  std::span<float> scales = ws.take_span<float>(static_cast<size_t>(T * k));
  std::fill(begin.begin(), begin.end(), 0);
  for (int64_t i = 0; i < T * k; ++i) {
    KAPITSA_CHECK(ids[i] >= 0 && ids[i] < n_experts, "router chose expert {} of {}", ids[i], n_experts);
    ++begin[static_cast<size_t>(ids[i]) + 1];
  }
  for (int64_t e = 0; e < n_experts; ++e) begin[static_cast<size_t>(e + 1)] += begin[static_cast<size_t>(e)];
  std::copy(begin.begin(), begin.end() - 1, fill.begin());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t at = fill[static_cast<size_t>(ids[t * k + j])]++;
      rows[static_cast<size_t>(at)] = static_cast<int32_t>(t);
      scales[static_cast<size_t>(at)] = weights[t * k + j];
    }
  ops::zero(out);
  for (int64_t e = 0; e < n_experts; ++e) {
    const int64_t b = begin[static_cast<size_t>(e)], n = begin[static_cast<size_t>(e + 1)] - b;
    if (n == 0) continue;
    Workspace::Scope expert_scope(ws);
    const auto r = rows.subspan(static_cast<size_t>(b), static_cast<size_t>(n));
    Tensor xe = ws.take(DType::f32, {n, x.dim(1)});
    Tensor ye = ws.take(DType::f32, {n, out.dim(1)});
    ops::gather_rows(x, r, xe);
    expert(e, xe, ye);
    ops::scale_add_rows(ye, r, scales.subspan(static_cast<size_t>(b), static_cast<size_t>(n)), out);
  }
}

}  // namespace kapitsa::models
