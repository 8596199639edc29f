// CPU attention ops. rope_neox: per-token cos/sin computed exactly as ops/ref (float32 angles, as
// transformers), then applied to every head. attention: flash-style causal GQA — a task takes one
// kv head, a tile of query tokens (all query heads of that group, so K/V are read once per tile) and
// a range of keys; scores in 64-key blocks with an online softmax, so memory stays O(tile), never
// O(T·S). Decode (few query tiles) splits the keys across tasks and merges the partial softmaxes.
// attention_paged runs the same kernel with keys addressed through a block table; key tiles and P·V
// runs stop at page boundaries, so each page is read as contiguous rows.
#include "base/thread_pool.h"
#include "ops/cpu/cpu.h"
#include "ops/cpu/dot_tile.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kapitsa::ops::cpu {

// x: [T, n_heads, D];  positions: [T].
void rope_neox(const Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq) {
  const int rotary_dim = static_cast<int>(2 * inv_freq.size());
  const int64_t T = x.dim(0), n_heads = x.dim(1), D = x.dim(2);
  const int half = rotary_dim / 2;
  float* px = x.f32();
  parallel_for(static_cast<size_t>(T), 1, [&](size_t begin, size_t end) {
    std::vector<float> cs(static_cast<size_t>(2 * half));
    for (size_t t = begin; t < end; ++t) {
      const float pos = static_cast<float>(positions[t]);
      for (int i = 0; i < half; ++i) {
        const float angle = pos * inv_freq[static_cast<size_t>(i)];
        cs[static_cast<size_t>(i)] = static_cast<float>(std::cos(static_cast<double>(angle)));
        cs[static_cast<size_t>(half + i)] = static_cast<float>(std::sin(static_cast<double>(angle)));
      }
      for (int64_t h = 0; h < n_heads; ++h) {
        float* head = px + (static_cast<int64_t>(t) * n_heads + h) * D;
        for (int i = 0; i < half; ++i) {  // simple loop: the compiler vectorises it
          const float c = cs[static_cast<size_t>(i)], s = cs[static_cast<size_t>(half + i)];
          const float x1 = head[i], x2 = head[i + half];
          head[i] = x1 * c - x2 * s;
          head[i + half] = x2 * c + x1 * s;
        }
      }
    }
  });
}

namespace {

constexpr int64_t kKeyBlock = 64;

struct AttnShape {
  int64_t T, Hq, Hkv, D, r, q_pos0;
  float scale;
  const float *q, *k, *v;
  // Paged history (attention_paged): key s is row s % page of page table[s / page]; rows inside a
  // page are laid out as in the contiguous op. table == nullptr: one contiguous run.
  const int32_t* table = nullptr;
  int64_t page = 0;
  // Offset in floats of key s's row [Hkv, D].
  int64_t row_offset(int64_t s) const {
    return (table == nullptr ? s : static_cast<int64_t>(table[s / page]) * page + s % page) * Hkv * D;
  }
  // How many keys from s on are contiguous in memory.
  int64_t run(int64_t s) const { return table == nullptr ? INT64_MAX : page - s % page; }
};

// Online-softmax state of M query rows: running max m, running sum l, unnormalised output acc.
struct Partial {
  std::vector<float> acc, m, l;
  void reset(int64_t M, int64_t D) {
    acc.assign(static_cast<size_t>(M * D), 0.0f);
    m.assign(static_cast<size_t>(M), -INFINITY);
    l.assign(static_cast<size_t>(M), 0.0f);
  }
};

// For RG rows g: acc[g, :] = acc[g, :]·corr[g] + Σ_{j<nk} p[g, j] · v[j, :].  p rows at stride ldp,
// v rows at stride ldv. Each v vector loaded once serves all RG rows.
template <int RG>
void accumulate_pv(float* acc, const float* corr, const float* p, int64_t ldp, int64_t nk, const float* v, int64_t ldv,
                   int64_t D) {
  using namespace simd;
#if defined(__AVX512F__)
  constexpr int kU = 4;  // RG·kU ≤ 16 accumulators
#else
  constexpr int kU = 2;  // RG·kU ≤ 8 accumulators
#endif
  int64_t d = 0;
  for (; d + kU * kW <= D; d += kU * kW) {
    vf a[RG][kU];
    for (int g = 0; g < RG; ++g)
      for (int u = 0; u < kU; ++u) a[g][u] = mul(load(acc + g * D + d + u * kW), set1(corr[g]));
    for (int64_t j = 0; j < nk; ++j) {
      vf vv[kU];
      for (int u = 0; u < kU; ++u) vv[u] = load(v + j * ldv + d + u * kW);
      for (int g = 0; g < RG; ++g) {
        const vf pj = set1(p[g * ldp + j]);
        for (int u = 0; u < kU; ++u) a[g][u] = simd::fma(pj, vv[u], a[g][u]);
      }
    }
    for (int g = 0; g < RG; ++g)
      for (int u = 0; u < kU; ++u) store(acc + g * D + d + u * kW, a[g][u]);
  }
  for (; d < D; ++d)
    for (int g = 0; g < RG; ++g) {
      float s = acc[g * D + d] * corr[g];
      for (int64_t j = 0; j < nk; ++j) s += p[g * ldp + j] * v[j * ldv + d];
      acc[g * D + d] = s;
    }
}

// One task: kv head g, query tokens [t0, t1), keys [s0, s1) → the partial softmax of its M rows.
void attend_tile(const AttnShape& a, int64_t g, int64_t t0, int64_t t1, int64_t s0, int64_t s1, Partial& out) {
  const int64_t D = a.D, r = a.r, M = (t1 - t0) * r, ldk = a.Hkv * D;
  thread_local std::vector<float> qt, scores, corr, ones;
  qt.resize(static_cast<size_t>(M * D));
  corr.resize(static_cast<size_t>(M));
  if (a.table != nullptr) ones.assign(static_cast<size_t>(M), 1.0f);
  scores.resize(static_cast<size_t>(M * kKeyBlock));
  // Gather the group's query rows (t-major, then head), pre-scaled.
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t j = 0; j < r; ++j) {
      const float* src = a.q + (t * a.Hq + g * r + j) * D;
      float* dst = qt.data() + ((t - t0) * r + j) * D;
      for (int64_t d = 0; d < D; ++d) dst[d] = src[d] * a.scale;
    }
  out.reset(M, D);
  const float* kg = a.k + g * D;
  const float* vg = a.v + g * D;
  const int64_t last_key = std::min(s1, a.q_pos0 + t1);  // exclusive
  for (int64_t kb = s0; kb < last_key; kb += kKeyBlock) {
    const int64_t nk = std::min(kKeyBlock, last_key - kb);
    // scores[i, j] = q_i · k_{kb+j}; a key tile never crosses a page boundary.
    for (int64_t i0 = 0; i0 < M; i0 += kTileT) {
      const int tb = static_cast<int>(std::min<int64_t>(kTileT, M - i0));
      for (int64_t j0 = 0; j0 < nk;) {
        const int rb = static_cast<int>(std::min<int64_t>({kTileR, nk - j0, a.run(kb + j0)}));
        dot_tile_any<simd::LoadF32>(tb, rb, qt.data() + i0 * D, D, kg + a.row_offset(kb + j0), ldk, D,
                                    scores.data() + i0 * kKeyBlock + j0, kKeyBlock);
        j0 += rb;
      }
    }
    // Softmax update per row: p ← exp(score − m_new) in place (0 for masked keys), corr rescales acc.
    int64_t nk_used = 0;
    for (int64_t i = 0; i < M; ++i) {
      const int64_t pos = a.q_pos0 + t0 + i / r;
      const int64_t visible = std::max<int64_t>(0, std::min(nk, pos - kb + 1));  // keys kb .. pos
      float* p = scores.data() + i * kKeyBlock;
      for (int64_t j = visible; j < nk; ++j) p[j] = 0.0f;
      corr[static_cast<size_t>(i)] = 1.0f;
      if (visible == 0) continue;
      nk_used = std::max(nk_used, visible);
      float mb = -INFINITY;
      for (int64_t j = 0; j < visible; ++j) mb = std::max(mb, p[j]);
      const float m_old = out.m[static_cast<size_t>(i)], m_new = std::max(m_old, mb);
      const float c = std::exp(m_old - m_new);  // 0 on the first block (m_old = -inf)
      float sum = 0;
      int64_t j = 0;
      for (; j + simd::kW <= visible; j += simd::kW) {
        const simd::vf e = simd::exp(simd::sub(simd::load(p + j), simd::set1(m_new)));
        simd::store(p + j, e);
        sum += simd::reduce_add(e);
      }
      for (; j < visible; ++j) sum += (p[j] = std::exp(p[j] - m_new));
      out.m[static_cast<size_t>(i)] = m_new;
      out.l[static_cast<size_t>(i)] = out.l[static_cast<size_t>(i)] * c + sum;
      corr[static_cast<size_t>(i)] = c;
    }
    if (nk_used == 0) continue;
    // P·V per contiguous run of keys (one run unless paged); acc is rescaled by corr once, first.
    for (int64_t j0 = 0; j0 < nk_used;) {
      const int64_t n = std::min(nk_used - j0, a.run(kb + j0));
      const float* vb = vg + a.row_offset(kb + j0);
      const float* c = j0 == 0 ? corr.data() : ones.data();
      const float* p = scores.data() + j0;
      int64_t i = 0;
      for (; i + 4 <= M; i += 4)
        accumulate_pv<4>(out.acc.data() + i * D, c + i, p + i * kKeyBlock, kKeyBlock, n, vb, ldk, D);
      for (; i < M; ++i) accumulate_pv<1>(out.acc.data() + i * D, c + i, p + i * kKeyBlock, kKeyBlock, n, vb, ldk, D);
      j0 += n;
    }
  }
}

void run_attention(const AttnShape& a, float* po);  // the flash kernel for both entry points (below)

}  // namespace

// q: [T, Hq, D];  k, v: [S, Hkv, D];  o: [T, Hq, D].
void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos0, float scale, const Tensor& o) {
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hkv = k.dim(1);
  if (T == 0) return;
  run_attention(AttnShape{T, Hq, Hkv, D, Hq / Hkv, q_pos0, scale, q.f32(), k.f32(), v.f32()}, o.f32());
}

// q: [T, Hq, D];  k_pages, v_pages: [n_pages, P, Hkv, D];  o: [T, Hq, D].
void attention_paged(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, std::span<const int32_t> block_table,
                     int64_t n_kv, int64_t q_pos0, float scale, const Tensor& o) {
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2);
  const int64_t P = k_pages.dim(1), Hkv = k_pages.dim(2);
  if (T == 0) return;
  AttnShape a{T, Hq, Hkv, D, Hq / Hkv, q_pos0, scale, q.f32(), k_pages.f32(), v_pages.f32()};
  a.table = block_table.data();
  a.page = P;
  run_attention(a, o.f32());
}

namespace {

void run_attention(const AttnShape& a, float* po) {
  const int64_t T = a.T, Hq = a.Hq, Hkv = a.Hkv, D = a.D, q_pos0 = a.q_pos0;
  // Query tile: about 32 rows (tokens × heads of the group) per task.
  const int64_t tq = std::max<int64_t>(1, 32 / a.r);
  const int64_t n_qt = (T + tq - 1) / tq;
  const int64_t n_keys = q_pos0 + T;
  const int64_t threads = static_cast<int64_t>(default_thread_pool().size());
  int64_t n_split = 1;
  if (Hkv * n_qt < 2 * threads && n_keys > 4 * kKeyBlock)
    n_split = std::min((2 * threads + Hkv * n_qt - 1) / (Hkv * n_qt), (n_keys + 4 * kKeyBlock - 1) / (4 * kKeyBlock));
  const int64_t split_len = ((n_keys + n_split - 1) / n_split + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
  n_split = (n_keys + split_len - 1) / split_len;

  auto write_rows = [&](int64_t g, int64_t t0, int64_t t1, const float* acc, const float* l) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t j = 0; j < a.r; ++j) {
        const int64_t i = (t - t0) * a.r + j;
        const float inv = 1.0f / l[i];
        float* dst = po + (t * Hq + g * a.r + j) * D;
        for (int64_t d = 0; d < D; ++d) dst[d] = acc[i * D + d] * inv;
      }
  };

  if (n_split == 1) {
    parallel_for(static_cast<size_t>(Hkv * n_qt), 1, [&](size_t begin, size_t end) {
      Partial part;
      for (size_t task = begin; task < end; ++task) {
        // Later query tiles see more keys: hand them out first for balance.
        const int64_t qt = n_qt - 1 - static_cast<int64_t>(task) / Hkv, g = static_cast<int64_t>(task) % Hkv;
        const int64_t t0 = qt * tq, t1 = std::min(T, t0 + tq);
        attend_tile(a, g, t0, t1, 0, n_keys, part);
        write_rows(g, t0, t1, part.acc.data(), part.l.data());
      }
    });
    return;
  }
  // Split keys: partial softmax per (g, query tile, split), then merge.
  const int64_t n_units = Hkv * n_qt;
  std::vector<Partial> parts(static_cast<size_t>(n_units * n_split));
  parallel_for(static_cast<size_t>(n_units * n_split), 1, [&](size_t begin, size_t end) {
    for (size_t task = begin; task < end; ++task) {
      const int64_t unit = static_cast<int64_t>(task) / n_split, sp = static_cast<int64_t>(task) % n_split;
      const int64_t g = unit % Hkv, t0 = (unit / Hkv) * tq, t1 = std::min(T, t0 + tq);
      attend_tile(a, g, t0, t1, sp * split_len, std::min(n_keys, (sp + 1) * split_len), parts[task]);
    }
  });
  parallel_for(static_cast<size_t>(n_units), 1, [&](size_t begin, size_t end) {
    std::vector<float> acc, l;
    for (size_t unit = begin; unit < end; ++unit) {
      const int64_t g = static_cast<int64_t>(unit) % Hkv, t0 = (static_cast<int64_t>(unit) / Hkv) * tq;
      const int64_t t1 = std::min(T, t0 + tq), M = (t1 - t0) * a.r;
      acc.assign(static_cast<size_t>(M * D), 0.0f);
      l.assign(static_cast<size_t>(M), 0.0f);
      for (int64_t i = 0; i < M; ++i) {
        float m = -INFINITY;
        for (int64_t sp = 0; sp < n_split; ++sp) m = std::max(m, parts[unit * n_split + sp].m[i]);
        for (int64_t sp = 0; sp < n_split; ++sp) {
          const Partial& p = parts[unit * n_split + sp];
          if (p.l[i] == 0.0f) continue;  // no visible key in this split
          const float f = std::exp(p.m[i] - m);
          l[i] += p.l[i] * f;
          for (int64_t d = 0; d < D; ++d) acc[i * D + d] += p.acc[i * D + d] * f;
        }
      }
      write_rows(g, t0, t1, acc.data(), l.data());
    }
  });
}

}  // namespace

}  // namespace kapitsa::ops::cpu
