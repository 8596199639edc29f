// CUDA sigmoid router (Nemotron-H / DeepSeek-V3 style): checks, then the kernel of moe_sigmoid.cu.
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"

namespace kapitsa::ops::cuda {
using detail::check_f32;

// logits: [T, E];  bias: [E] or empty;  expert_ids: [T, k] i32;  expert_weights: [T, k] f32.
void moe_route_sigmoid(const Tensor& logits, const Tensor& bias, int k, int n_group, int topk_group, bool renormalize,
                       float scaling, const Tensor& expert_ids, const Tensor& expert_weights) {
  check_f32(logits, "moe_route_sigmoid", "logits"), check_f32(expert_weights, "moe_route_sigmoid", "expert_weights");
  KAPITSA_CHECK(expert_ids.dtype() == DType::i32, "moe_route_sigmoid: expert_ids must be I32, got {}",
                dtype_name(expert_ids.dtype()));
  detail::check_on_device(expert_ids, "moe_route_sigmoid", "expert_ids");
  const int64_t E = logits.dim(-1), T = detail::rows_of(logits);
  KAPITSA_CHECK(n_group >= 1 && n_group <= kernels::kMoeMaxGroups && E % n_group == 0 && topk_group >= 1 &&
                    topk_group <= n_group,
                "moe_route_sigmoid: {} experts in {} groups (at most {}), topk_group {}", E, n_group,
                kernels::kMoeMaxGroups, topk_group);
  KAPITSA_CHECK(E <= kernels::kMoeMaxExperts, "moe_route_sigmoid: {} experts (the cuda router takes at most {})", E,
                kernels::kMoeMaxExperts);
  KAPITSA_CHECK(k >= 1 && k <= topk_group * (E / n_group), "moe_route_sigmoid: k = {} with {} experts in reach", k,
                topk_group * (E / n_group));
  KAPITSA_CHECK(k <= 32, "moe_route_sigmoid: k = {} (the cuda router's warp picks at most 32 experts a token)", k);
  KAPITSA_CHECK(expert_ids.numel() == T * k && expert_weights.numel() == T * k,
                "moe_route_sigmoid: expert_ids {} / expert_weights {} must be [{}, {}]", expert_ids.shape().str(),
                expert_weights.shape().str(), T, k);
  if (!bias.empty()) {
    check_f32(bias, "moe_route_sigmoid", "bias");
    KAPITSA_CHECK(bias.numel() == E, "moe_route_sigmoid: bias {} for {} experts", bias.shape().str(), E);
  }
  kernels::moe_route_sigmoid(logits.f32(), bias.empty() ? nullptr : bias.f32(), T, E, k, n_group, topk_group, renormalize,
                             scaling, expert_ids.data_as<int32_t>(), expert_weights.f32(), detail::stream());
  detail::check_launch("moe_route_sigmoid");
}

}  // namespace kapitsa::ops::cuda
