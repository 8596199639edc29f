// Memory and roofline arithmetic for catalog models (memory_fit.h).
#include "cli/catalog/memory_fit.h"

#include <algorithm>
#include <cmath>

namespace kapitsa::cli::catalog {

namespace {
constexpr double kKvBytes = 2;     // bf16 K and V
constexpr double kStateBytes = 4;  // fp32 recurrent and conv state
}  // namespace

double kv_bytes_per_token(const ModelShape& s) { return 2.0 * s.attention_layers * s.kv_heads * s.head_dim * kKvBytes; }

double recurrent_state_bytes(const ModelShape& s) {
  const double conv_history = s.conv_kernel - 1;
  // Gated DeltaNet: a [v_heads, k_dim, v_dim] state; the conv runs over q, k (k_heads × k_dim each) and v.
  const double gdn_conv_channels = 2.0 * s.gdn_k_heads * s.gdn_k_dim + double(s.gdn_v_heads) * s.gdn_v_dim;
  const double gdn = double(s.gdn_v_heads) * s.gdn_k_dim * s.gdn_v_dim + conv_history * gdn_conv_channels;
  // Mamba-2: a [heads, head_dim, state] state; the conv runs over x (heads × head_dim), B and C (groups × state each).
  const double mamba_conv_channels = double(s.mamba_heads) * s.mamba_head_dim + 2.0 * s.mamba_groups * s.mamba_state;
  const double mamba = double(s.mamba_heads) * s.mamba_head_dim * s.mamba_state + conv_history * mamba_conv_channels;
  return (s.gdn_layers * gdn + s.mamba_layers * mamba) * kStateBytes;
}

FitEstimate estimate_fit(const ModelEntry& model, const QuantEntry& quant, double memory_bytes, double bandwidth_bytes_per_s) {
  FitEstimate f;
  f.weight_bytes = model.params * quant.bits_per_weight / 8;
  f.kv_bytes_per_token = kv_bytes_per_token(model.shape);
  f.state_bytes = recurrent_state_bytes(model.shape);
  const double left = memory_bytes - f.weight_bytes - f.state_bytes - kRuntimeOverheadBytes;
  if (left > 0) {
    const double tokens = f.kv_bytes_per_token > 0 ? std::floor(left / f.kv_bytes_per_token) : double(model.max_context);
    f.max_context = long(std::min(tokens, double(model.max_context)));
  }
  f.fits = f.max_context >= std::min(kMinUsefulContext, model.max_context) && left > 0;
  const double active_bytes = model.active_params * quant.bits_per_weight / 8;
  if (active_bytes > 0) f.decode_tokens_per_s = bandwidth_bytes_per_s / active_bytes;
  return f;
}

}  // namespace kapitsa::cli::catalog
