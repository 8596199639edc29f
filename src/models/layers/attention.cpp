// Attention layer forward: projections straight into the KV cache, norms, RoPE, the attention op,
// output gate, output projection.
#include "models/layers/attention.h"

#include "models/layers/rope.h"
#include "ops/ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace kapitsa::models {

Expected<AttentionWeights> AttentionWeights::load(const weights::Checkpoint& ckpt, const std::string& prefix,
                                                  const AttentionConfig& c) {
  AttentionWeights w;
  const int64_t q_rows = c.n_heads * c.head_dim * (c.output_gate ? 2 : 1);
  KAPITSA_TRY(w.q_proj, ckpt.get(prefix + "q_proj.weight", {q_rows, c.hidden_size}));
  KAPITSA_TRY(w.k_proj, ckpt.get(prefix + "k_proj.weight", {c.n_kv_heads * c.head_dim, c.hidden_size}));
  KAPITSA_TRY(w.v_proj, ckpt.get(prefix + "v_proj.weight", {c.n_kv_heads * c.head_dim, c.hidden_size}));
  KAPITSA_TRY(w.o_proj, ckpt.get(prefix + "o_proj.weight", {c.hidden_size, c.n_heads * c.head_dim}));
  if (c.qk_norm) {
    KAPITSA_TRY(w.q_norm, ckpt.get_f32(prefix + "q_norm.weight", {c.head_dim}));
    KAPITSA_TRY(w.k_norm, ckpt.get_f32(prefix + "k_norm.weight", {c.head_dim}));
  }
  if (c.rotary_dim > 0) w.rope_inv_freq = models::rope_inv_freq(c.rotary_dim, c.rope_theta, c.rope_bf16_frequencies);
  return w;
}

void attention_forward(const AttentionConfig& c, const AttentionWeights& w, const Tensor& x,
                       std::span<const AttentionSegment> segments, const Tensor& out) {
  const int64_t T = x.dim(0), Hq = c.n_heads, Hkv = c.n_kv_heads, D = c.head_dim;

  // q (and the gate) — q_proj rows are laid out per head as [q_h | gate_h] when gated.
  Buffer q = Buffer::allocate(DType::f32, {T, Hq, D});
  Buffer gate;
  if (c.output_gate) {
    Buffer qg = Buffer::allocate(DType::f32, {T, Hq * 2 * D});
    ops::matmul(x, w.q_proj, qg);
    gate = Buffer::allocate(DType::f32, {T, Hq, D});
    const Tensor parts[] = {q.tensor().reshape({T * Hq, D}), gate.tensor().reshape({T * Hq, D})};
    ops::split_columns(qg.tensor().reshape({T * Hq, 2 * D}), parts);
  } else {
    ops::matmul(x, w.q_proj, q.tensor().reshape({T, Hq * D}));
  }
  Buffer k = Buffer::allocate(DType::f32, {T, Hkv, D});
  Buffer v = Buffer::allocate(DType::f32, {T, Hkv, D});
  ops::matmul(x, w.k_proj, k.tensor().reshape({T, Hkv * D}));
  ops::matmul(x, w.v_proj, v.tensor().reshape({T, Hkv * D}));

  if (c.qk_norm) {
    ops::rms_norm(q.tensor().reshape({T * Hq, D}), w.q_norm, c.norm_eps, c.norm_weight_offset,
                  q.tensor().reshape({T * Hq, D}));
    ops::rms_norm(k.tensor().reshape({T * Hkv, D}), w.k_norm, c.norm_eps, c.norm_weight_offset,
                  k.tensor().reshape({T * Hkv, D}));
  }
  if (c.rotary_dim > 0) {
    std::vector<int32_t> positions(static_cast<size_t>(T));
    for (const AttentionSegment& s : segments)
      std::iota(positions.begin() + s.begin, positions.begin() + s.begin + s.length, static_cast<int32_t>(s.pos0));
    ops::rope_neox(q, positions, w.rope_inv_freq);
    ops::rope_neox(k, positions, w.rope_inv_freq);
  }

  Buffer o = Buffer::allocate(DType::f32, {T, Hq, D});
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (const AttentionSegment& s : segments) {
    const int64_t end = s.pos0 + s.length, P = s.kv.k_pages.dim(1);
    // The new K/V rows into their pages, one run per page.
    for (int64_t pos = s.pos0; pos < end;) {
      const int64_t row = pos % P, n = std::min(P - row, end - pos), from = s.begin + (pos - s.pos0);
      const int64_t page = s.kv.block_table[static_cast<size_t>(pos / P)];
      ops::copy(k.tensor().rows(from, from + n), s.kv.k_pages.index(page).rows(row, row + n));
      ops::copy(v.tensor().rows(from, from + n), s.kv.v_pages.index(page).rows(row, row + n));
      pos += n;
    }
    ops::attention_paged(q.tensor().rows(s.begin, s.begin + s.length), s.kv.k_pages, s.kv.v_pages, s.kv.block_table,
                         end, s.pos0, scale, o.tensor().rows(s.begin, s.begin + s.length));
  }
  const Tensor o_flat = o.tensor().reshape({T, Hq * D});
  if (c.output_gate) ops::mul_sigmoid(o_flat, gate.tensor().reshape({T, Hq * D}), o_flat);
  ops::matmul(o_flat, w.o_proj, out);
}

}  // namespace kapitsa::models
