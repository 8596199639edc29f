// The memory and roofline arithmetic of `kapitsa doctor` on a hand-computed model, and on the shipped
// 35B-A3B shape against the figure in /work/shared/notes/serving.md (20 KiB of KV per token).
#include "cli/catalog/memory_fit.h"

#include <gtest/gtest.h>

namespace kapitsa::testing {
namespace {
using namespace cli::catalog;

ModelEntry toy_model() {
  ModelEntry m;
  m.alias = "toy";
  m.params = 1e9, m.active_params = 1e9, m.max_context = 2'000'000;
  m.shape.attention_layers = 2, m.shape.kv_heads = 2, m.shape.head_dim = 64;
  m.shape.gdn_layers = 1, m.shape.gdn_k_heads = 1, m.shape.gdn_v_heads = 2, m.shape.gdn_k_dim = 4, m.shape.gdn_v_dim = 4;
  m.shape.conv_kernel = 4;
  return m;
}

TEST(MemoryFit, HandComputedCase) {
  const ModelEntry m = toy_model();
  QuantEntry q;
  q.bits_per_weight = 8;
  // KV: 2 (K,V) × 2 layers × 2 heads × 64 × 2 B = 1024 B per token.
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(m.shape), 1024);
  // GDN state: 2 v-heads × 4 × 4 = 32 floats; conv: 3 × (2·1·4 + 2·4) = 48 floats; 80 × 4 B = 320 B.
  EXPECT_DOUBLE_EQ(recurrent_state_bytes(m.shape), 320);
  // 3 GiB: 3221225472 − 1e9 weights − 320 state − 1 GiB overhead = 1147483328 B → 1120589 tokens (floor).
  const FitEstimate f = estimate_fit(m, q, 3.0 * 1024 * 1024 * 1024, 1e10);
  EXPECT_DOUBLE_EQ(f.weight_bytes, 1e9);
  EXPECT_TRUE(f.fits);
  EXPECT_EQ(f.max_context, 1120589);
  EXPECT_DOUBLE_EQ(f.decode_tokens_per_s, 10);  // 1e10 B/s ÷ 1e9 B per token
}

TEST(MemoryFit, ContextIsCappedAndTooLittleMemoryDoesNotFit) {
  ModelEntry m = toy_model();
  m.max_context = 4096;
  QuantEntry q;
  q.bits_per_weight = 8;
  EXPECT_EQ(estimate_fit(m, q, 64.0 * 1024 * 1024 * 1024, 1e10).max_context, 4096);
  const FitEstimate small = estimate_fit(m, q, 1.5e9, 1e10);  // less than weights + overhead
  EXPECT_FALSE(small.fits);
  EXPECT_EQ(small.max_context, 0);
}

TEST(MemoryFit, MambaStateAndMoeActiveWeights) {
  ModelEntry m;
  m.params = 30e9, m.active_params = 3e9, m.max_context = 262144;
  m.shape.mamba_layers = 1, m.shape.mamba_heads = 2, m.shape.mamba_head_dim = 4, m.shape.mamba_state = 8;
  m.shape.mamba_groups = 1, m.shape.conv_kernel = 4;
  // 2·4·8 = 64 floats of state; conv 3 × (2·4 + 2·1·8) = 72 floats; 136 × 4 B.
  EXPECT_DOUBLE_EQ(recurrent_state_bytes(m.shape), 544);
  QuantEntry q;
  q.bits_per_weight = 4;
  const FitEstimate f = estimate_fit(m, q, 1e12, 3e9);
  EXPECT_DOUBLE_EQ(f.weight_bytes, 15e9);
  EXPECT_DOUBLE_EQ(f.decode_tokens_per_s, 2);  // 3e9 B/s ÷ (3e9 active × 4 / 8) B
  EXPECT_EQ(f.max_context, 262144);  // no attention layers: no KV, only the model's limit
}

TEST(MemoryFit, Qwen35_35bKvMatchesTheNotes) {
  ModelShape s;
  s.attention_layers = 10, s.kv_heads = 2, s.head_dim = 256;
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(s), 20 * 1024);
}

}  // namespace
}  // namespace kapitsa::testing
