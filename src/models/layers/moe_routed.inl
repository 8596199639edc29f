// run_routed_experts (template, included by moe.h): group the tokens by expert, gather their rows,
// run the expert once per group, scatter-add the weighted results.
#pragma once

#include "ops/ops.h"

#include <cstring>
#include <vector>

namespace kapitsa::models {

template <typename ExpertFn>
void run_routed_experts(int64_t n_experts, const Tensor& expert_ids, const Tensor& expert_weights, const Tensor& x,
                        const Tensor& out, ExpertFn&& expert) {
  const int64_t T = expert_ids.dim(0), k = expert_ids.dim(1);
  const int32_t* ids = expert_ids.data_as<const int32_t>();
  const float* weights = expert_weights.f32();
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(n_experts));
  std::vector<std::vector<float>> scales(static_cast<size_t>(n_experts));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[t * k + j];
      KAPITSA_CHECK(e >= 0 && e < n_experts, "router chose expert {} of {}", e, n_experts);
      rows[static_cast<size_t>(e)].push_back(static_cast<int32_t>(t));
      scales[static_cast<size_t>(e)].push_back(weights[t * k + j]);
    }
  std::memset(out.data(), 0, out.nbytes());
  for (int64_t e = 0; e < n_experts; ++e) {
    const auto& r = rows[static_cast<size_t>(e)];
    if (r.empty()) continue;
    const int64_t n = static_cast<int64_t>(r.size());
    Buffer xe = Buffer::allocate(DType::f32, {n, x.dim(1)});
    Buffer ye = Buffer::allocate(DType::f32, {n, out.dim(1)});
    ops::gather_rows(x, r, xe);
    expert(e, xe.tensor(), ye.tensor());
    ops::scale_add_rows(ye, r, scales[static_cast<size_t>(e)], out);
  }
}

}  // namespace kapitsa::models
