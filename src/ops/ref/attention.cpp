// Reference attention ops: partial NeoX RoPE and causal grouped-query attention.
// RoPE reproduces transformers' float32 arithmetic (angle = float32(pos · inv_freq), cos/sin rounded
// to float32) because logits at long positions are sensitive to the angle's rounding; the caller
// supplies inv_freq. Attention is the naive two-pass softmax in double.
#include "ops/composed/composed.h"
#include "ops/ref/ref.h"
#include "ops/ref/ref_util.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kapitsa::ops::ref {

// x: [T, n_heads, D];  positions: [T].
void rope_neox(const Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq) {
  const int rotary_dim = static_cast<int>(2 * inv_freq.size());
  const int64_t T = x.dim(0), n_heads = x.dim(1), D = x.dim(2);
  const int half = rotary_dim / 2;
  float* px = x.f32();
  for (int64_t t = 0; t < T; ++t) {
    const float pos = static_cast<float>(positions[static_cast<size_t>(t)]);
    for (int i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[static_cast<size_t>(i)];  // float32 product, as torch
      const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
      const float s = static_cast<float>(std::sin(static_cast<double>(angle)));
      for (int64_t h = 0; h < n_heads; ++h) {
        float* head = px + (t * n_heads + h) * D;
        const float x1 = head[i], x2 = head[i + half];
        head[i] = x1 * c - x2 * s;         // q*cos + rotate_half(q)*sin, first half: -x2
        head[i + half] = x2 * c + x1 * s;  // second half: +x1
      }
    }
  }
}

// q: [T, Hq, D];  k, v: [S, Hkv, D];  o: [T, Hq, D].
void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos0, float scale, const Tensor& o) {
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hkv = k.dim(1);
  const int64_t group = Hq / Hkv;
  const float *pq = q.f32(), *pk = k.f32(), *pv = v.f32();
  float* po = o.f32();
  std::vector<double> scores, acc(static_cast<size_t>(D));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n_keys = q_pos0 + t + 1;
    scores.assign(static_cast<size_t>(n_keys), 0.0);
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t g = h / group;
      const float* qh = pq + (t * Hq + h) * D;
      double m = -INFINITY;
      for (int64_t s = 0; s < n_keys; ++s) {
        const float* ks = pk + (s * Hkv + g) * D;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(qh[d]) * ks[d];
        scores[static_cast<size_t>(s)] = dot * scale;
        m = std::max(m, dot * scale);
      }
      double sum = 0;
      for (auto& sc : scores) sum += (sc = std::exp(sc - m));
      acc.assign(static_cast<size_t>(D), 0.0);
      for (int64_t s = 0; s < n_keys; ++s) {
        const float* vs = pv + (s * Hkv + g) * D;
        const double p = scores[static_cast<size_t>(s)] / sum;
        for (int64_t d = 0; d < D; ++d) acc[static_cast<size_t>(d)] += p * vs[d];
      }
      for (int64_t d = 0; d < D; ++d) po[(t * Hq + h) * D + d] = static_cast<float>(acc[static_cast<size_t>(d)]);
    }
  }
}

// q: [T, Hq, D];  k_pages, v_pages: [n_pages, P, Hkv, D] f32|bf16|f16;  o: [T, Hq, D].
// Gathers the history into contiguous f32 K/V (widening exactly) and runs the contiguous reference:
// the two ops are the same function by construction, and the gather is the only paged logic to check.
void attention_paged(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, std::span<const int32_t> block_table,
                     int64_t n_kv, int64_t q_pos0, float scale, const Tensor& o) {
  const int64_t P = k_pages.dim(1), Hkv = k_pages.dim(2), D = k_pages.dim(3);
  Buffer k = Buffer::allocate(DType::f32, {std::max<int64_t>(n_kv, 1), Hkv, D});
  Buffer v = Buffer::allocate(DType::f32, {std::max<int64_t>(n_kv, 1), Hkv, D});
  const int64_t row = Hkv * D;
  for (int64_t s = 0; s < n_kv; ++s) {
    const int64_t at = (static_cast<int64_t>(block_table[static_cast<size_t>(s / P)]) * P + s % P) * row;
    for (int64_t i = 0; i < row; ++i) {
      k.f32()[s * row + i] = detail::load(k_pages, at + i);
      v.f32()[s * row + i] = detail::load(v_pages, at + i);
    }
  }
  attention(q, k.tensor().rows(0, n_kv), v.tensor().rows(0, n_kv), q_pos0, scale, o);
}

// rows: [T, Hkv, D] f32;  pages: [n_pages, P, Hkv, D] f32|bf16|f16.
void write_paged_rows(const Tensor& rows, const Tensor& pages, std::span<const int32_t> block_table, int64_t pos0) {
  const int64_t T = rows.dim(0), P = pages.dim(1), row = rows.dim(1) * rows.dim(2);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = pos0 + t;
    const int64_t at = (static_cast<int64_t>(block_table[static_cast<size_t>(pos / P)]) * P + pos % P) * row;
    for (int64_t i = 0; i < row; ++i) detail::store(pages, at + i, rows.f32()[t * row + i]);
  }
}

// q, o: [T, Hq, D];  k_pages, v_pages: [n_pages, P, Hkv, D].  attention_paged per sequence.
void attention_paged_varlen(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, const SeqBatch& batch,
                            float scale, const Tensor& o) {
  for (int64_t i = 0; i < batch.n_seqs(); ++i) {
    const int64_t r0 = batch.row_offsets[size_t(i)], r1 = batch.row_offsets[size_t(i + 1)];
    const int64_t pos0 = batch.positions0[size_t(i)];
    attention_paged(q.rows(r0, r1), k_pages, v_pages, batch.block_table(i), pos0 + r1 - r0, pos0, scale,
                    o.rows(r0, r1));
  }
}

// rows: [T, Hkv, D];  pages: [n_pages, P, Hkv, D].  write_paged_rows per sequence.
void write_paged_rows_varlen(const Tensor& rows, const Tensor& pages, const SeqBatch& batch) {
  for (int64_t i = 0; i < batch.n_seqs(); ++i)
    write_paged_rows(rows.rows(batch.row_offsets[size_t(i)], batch.row_offsets[size_t(i + 1)]), pages,
                     batch.block_table(i), batch.positions0[size_t(i)]);
}

void attention_prep_varlen(const Tensor& qg, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                           const Tensor& k_norm, float eps, float weight_offset, std::span<const int32_t> positions,
                           std::span<const float> inv_freq, const Tensor& k_pages, const Tensor& v_pages,
                           const SeqBatch& batch, const Tensor& q, const Tensor& gate) {
  composed::attention_prep_varlen(*backend(), qg, k, v, q_norm, k_norm, eps, weight_offset, positions, inv_freq, k_pages,
                                  v_pages, batch, q, gate);
}

}  // namespace kapitsa::ops::ref
