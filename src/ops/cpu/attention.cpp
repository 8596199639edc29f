// CPU attention ops. rope_neox: per-token cos/sin computed exactly as ops/ref (float32 angles, as
// transformers), then applied to every head. attention: flash-style causal GQA — a task takes one
// kv head, a tile of query tokens (all query heads of that group, so K/V are read once per tile) and
// a range of keys; scores in 64-key blocks with an online softmax, so memory stays O(tile), never
// O(T·S). Decode (few query tiles) splits the keys across tasks and merges the partial softmaxes.
// attention_paged runs the same kernel with keys addressed through a block table; key tiles and P·V
// runs stop at page boundaries, so each page is read as contiguous rows; bf16/f16 pages are widened in
// registers as they are loaded (the kernel is templated on the loader). write_paged_rows stores new
// K/V rows into pages, narrowing to the pages' dtype.
#include "base/thread_pool.h"
#include "ops/composed/composed.h"
#include "ops/cpu/level.h"
#include "ops/cpu/dot_tile.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {

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
  const float* q;
  const void *k, *v;  // f32, bf16 or f16 (the loader WL of the kernel says which)
  // Paged history (attention_paged): key s is row s % page of page table[s / page]; rows inside a
  // page are laid out as in the contiguous op. table == nullptr: one contiguous run.
  const int32_t* table = nullptr;
  int64_t page = 0;
  // Offset in floats of key s's row [Hkv, D].
  int64_t row_offset(int64_t s) const {
    return (table == nullptr ? s : static_cast<int64_t>(table[s / page]) * page + s % page) * Hkv * D;
  }
  float* o = nullptr;  // [T, Hq, D]
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
template <class WL, int RG>
void accumulate_pv(float* acc, const float* corr, const float* p, int64_t ldp, int64_t nk, const typename WL::T* v,
                   int64_t ldv, int64_t D) {
  using namespace simd;
#if defined(__AVX512F__) || defined(__aarch64__)
  constexpr int kU = 4;  // RG·kU ≤ 16 accumulators (of 32 registers)
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
      for (int u = 0; u < kU; ++u) vv[u] = WL::load(v + j * ldv + d + u * kW);
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
      for (int64_t j = 0; j < nk; ++j) s += p[g * ldp + j] * WL::scalar(v + j * ldv + d);
      acc[g * D + d] = s;
    }
}

// One task: kv head g, query tokens [t0, t1), keys [s0, s1) → the partial softmax of its M rows.
template <class WL>
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
  const auto* kg = static_cast<const typename WL::T*>(a.k) + g * D;
  const auto* vg = static_cast<const typename WL::T*>(a.v) + g * D;
  const int64_t last_key = std::min(s1, a.q_pos0 + t1);  // exclusive
  for (int64_t kb = s0; kb < last_key; kb += kKeyBlock) {
    const int64_t nk = std::min(kKeyBlock, last_key - kb);
    // scores[i, j] = q_i · k_{kb+j}; a key tile never crosses a page boundary.
    for (int64_t i0 = 0; i0 < M; i0 += kTileT) {
      const int tb = static_cast<int>(std::min<int64_t>(kTileT, M - i0));
      for (int64_t j0 = 0; j0 < nk;) {
        const int rb = static_cast<int>(std::min<int64_t>({kTileR, nk - j0, a.run(kb + j0)}));
        dot_tile_any<WL>(tb, rb, qt.data() + i0 * D, D, kg + a.row_offset(kb + j0), ldk, D,
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
      const auto* vb = vg + a.row_offset(kb + j0);
      const float* c = j0 == 0 ? corr.data() : ones.data();
      const float* p = scores.data() + j0;
      int64_t i = 0;
      for (; i + 4 <= M; i += 4)
        accumulate_pv<WL, 4>(out.acc.data() + i * D, c + i, p + i * kKeyBlock, kKeyBlock, n, vb, ldk, D);
      for (; i < M; ++i)
        accumulate_pv<WL, 1>(out.acc.data() + i * D, c + i, p + i * kKeyBlock, kKeyBlock, n, vb, ldk, D);
      j0 += n;
    }
  }
}

template <class WL>
void run_attention(std::span<const AttnShape> seqs);  // the flash kernel for every entry point (below)
void run_attention_as(DType kv, std::span<const AttnShape> seqs);

}  // namespace

// q: [T, Hq, D];  k, v: [S, Hkv, D];  o: [T, Hq, D].
void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos0, float scale, const Tensor& o) {
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hkv = k.dim(1);
  if (T == 0) return;
  AttnShape a{T, Hq, Hkv, D, Hq / Hkv, q_pos0, scale, q.f32(), k.f32(), v.f32()};
  a.o = o.f32();
  run_attention<simd::LoadF32>({&a, 1});
}

// q: [T, Hq, D];  k_pages, v_pages: [n_pages, P, Hkv, D] f32|bf16|f16;  o: [T, Hq, D].
void attention_paged(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, std::span<const int32_t> block_table,
                     int64_t n_kv, int64_t q_pos0, float scale, const Tensor& o) {
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2);
  const int64_t P = k_pages.dim(1), Hkv = k_pages.dim(2);
  if (T == 0) return;
  AttnShape a{T, Hq, Hkv, D, Hq / Hkv, q_pos0, scale, q.f32(), k_pages.data(), v_pages.data()};
  a.table = block_table.data();
  a.page = P;
  a.o = o.f32();
  run_attention_as(k_pages.dtype(), {&a, 1});
}

// rows: [T, Hkv, D] f32;  pages: [n_pages, P, Hkv, D] f32|bf16|f16.
void write_paged_rows(const Tensor& rows, const Tensor& pages, std::span<const int32_t> block_table, int64_t pos0) {
  const int64_t T = rows.dim(0), P = pages.dim(1), row = rows.dim(1) * rows.dim(2);
  const size_t es = dtype_size(pages.dtype());
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = pos0 + t;
    const int64_t at = (static_cast<int64_t>(block_table[static_cast<size_t>(pos / P)]) * P + pos % P) * row;
    const float* src = rows.f32() + t * row;
    void* dst = static_cast<uint8_t*>(pages.data()) + static_cast<size_t>(at) * es;
    switch (pages.dtype()) {
      case DType::bf16:
        for (int64_t i = 0; i < row; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(src[i]);
        break;
      case DType::f16:
        for (int64_t i = 0; i < row; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_f16(src[i]);
        break;
      default:
        std::memcpy(dst, src, static_cast<size_t>(row) * sizeof(float));
    }
  }
}

// q, o: [T, Hq, D];  k_pages, v_pages: [n_pages, P, Hkv, D] f32|bf16|f16.
void attention_paged_varlen(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, const SeqBatch& batch,
                            float scale, const Tensor& o) {
  const int64_t Hq = q.dim(1), D = q.dim(2), P = k_pages.dim(1), Hkv = k_pages.dim(2);
  std::vector<AttnShape> seqs;
  seqs.reserve(size_t(batch.n_seqs()));
  for (int64_t i = 0; i < batch.n_seqs(); ++i) {
    const int64_t r0 = batch.row_offsets[size_t(i)];
    AttnShape a{
        batch.rows(i), Hq, Hkv, D, Hq / Hkv, batch.positions0[size_t(i)], scale, q.f32() + r0 * Hq * D, k_pages.data(),
        v_pages.data()};
    a.table = batch.block_table(i).data();
    a.page = P;
    a.o = o.f32() + r0 * Hq * D;
    seqs.push_back(a);
  }
  run_attention_as(k_pages.dtype(), seqs);
}

// rows: [T, Hkv, D] f32;  pages: [n_pages, P, Hkv, D] f32|bf16|f16.
void write_paged_rows_varlen(const Tensor& rows, const Tensor& pages, const SeqBatch& batch) {
  for (int64_t i = 0; i < batch.n_seqs(); ++i)
    write_paged_rows(rows.rows(batch.row_offsets[size_t(i)], batch.row_offsets[size_t(i + 1)]), pages,
                     batch.block_table(i), batch.positions0[size_t(i)]);
}

namespace {

// The flash kernel for every entry point: all sequences' (kv head, query tile[, key split]) tasks in one
// parallel loop. Decode (few query tiles in all) splits long histories across tasks and merges the
// partial softmaxes.
template <class WL>
void run_attention(std::span<const AttnShape> seqs) {
  struct Unit {
    size_t seq;
    int64_t g, t0, t1, n_split, split_len;
    size_t first_part;  // where its partials go when split
  };
  const int64_t threads = static_cast<int64_t>(default_thread_pool().size());
  int64_t total = 0;  // (kv head, query tile) units before splitting
  for (const AttnShape& a : seqs)
    total += a.Hkv * ((a.T + std::max<int64_t>(1, 32 / a.r) - 1) / std::max<int64_t>(1, 32 / a.r));
  std::vector<Unit> units;
  std::vector<std::pair<size_t, int64_t>> tasks;  // (unit, split)
  size_t n_parts = 0;
  for (size_t si = 0; si < seqs.size(); ++si) {
    const AttnShape& a = seqs[si];
    if (a.T == 0) continue;
    // Query tile: about 32 rows (tokens × heads of the group) per task.
    const int64_t tq = std::max<int64_t>(1, 32 / a.r), n_qt = (a.T + tq - 1) / tq, n_keys = a.q_pos0 + a.T;
    int64_t n_split = 1;
    if (total < 2 * threads && n_keys > 4 * kKeyBlock)
      n_split = std::min((2 * threads + total - 1) / total, (n_keys + 4 * kKeyBlock - 1) / (4 * kKeyBlock));
    const int64_t split_len = ((n_keys + n_split - 1) / n_split + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
    n_split = (n_keys + split_len - 1) / split_len;
    // Later query tiles see more keys: hand them out first for balance.
    for (int64_t qt = n_qt - 1; qt >= 0; --qt)
      for (int64_t g = 0; g < a.Hkv; ++g) {
        units.push_back({si, g, qt * tq, std::min(a.T, (qt + 1) * tq), n_split, split_len, n_parts});
        for (int64_t sp = 0; sp < n_split; ++sp) tasks.emplace_back(units.size() - 1, sp);
        if (n_split > 1) n_parts += static_cast<size_t>(n_split);
      }
  }

  auto write_rows = [&](const Unit& u, const float* acc, const float* l) {
    const AttnShape& a = seqs[u.seq];
    for (int64_t t = u.t0; t < u.t1; ++t)
      for (int64_t j = 0; j < a.r; ++j) {
        const int64_t i = (t - u.t0) * a.r + j;
        const float inv = 1.0f / l[i];
        float* dst = a.o + (t * a.Hq + u.g * a.r + j) * a.D;
        for (int64_t d = 0; d < a.D; ++d) dst[d] = acc[i * a.D + d] * inv;
      }
  };

  std::vector<Partial> parts(n_parts);
  parallel_for(tasks.size(), 1, [&](size_t begin, size_t end) {
    Partial whole;
    for (size_t task = begin; task < end; ++task) {
      const Unit& u = units[tasks[task].first];
      const AttnShape& a = seqs[u.seq];
      const int64_t sp = tasks[task].second, n_keys = a.q_pos0 + a.T;
      if (u.n_split == 1) {
        attend_tile<WL>(a, u.g, u.t0, u.t1, 0, n_keys, whole);
        write_rows(u, whole.acc.data(), whole.l.data());
      } else {
        attend_tile<WL>(a, u.g, u.t0, u.t1, sp * u.split_len, std::min(n_keys, (sp + 1) * u.split_len),
                        parts[u.first_part + static_cast<size_t>(sp)]);
      }
    }
  });
  if (n_parts == 0) return;
  // Merge the splits of each split unit.
  parallel_for(units.size(), 1, [&](size_t begin, size_t end) {
    std::vector<float> acc, l;
    for (size_t ui = begin; ui < end; ++ui) {
      const Unit& u = units[ui];
      if (u.n_split == 1) continue;
      const int64_t D = seqs[u.seq].D, M = (u.t1 - u.t0) * seqs[u.seq].r;
      acc.assign(static_cast<size_t>(M * D), 0.0f);
      l.assign(static_cast<size_t>(M), 0.0f);
      for (int64_t i = 0; i < M; ++i) {
        float m = -INFINITY;
        for (int64_t sp = 0; sp < u.n_split; ++sp) m = std::max(m, parts[u.first_part + size_t(sp)].m[size_t(i)]);
        for (int64_t sp = 0; sp < u.n_split; ++sp) {
          const Partial& p = parts[u.first_part + size_t(sp)];
          if (p.l[size_t(i)] == 0.0f) continue;  // no visible key in this split
          const float f = std::exp(p.m[size_t(i)] - m);
          l[size_t(i)] += p.l[size_t(i)] * f;
          for (int64_t d = 0; d < D; ++d) acc[size_t(i * D + d)] += p.acc[size_t(i * D + d)] * f;
        }
      }
      write_rows(u, acc.data(), l.data());
    }
  });
}

void run_attention_as(DType kv, std::span<const AttnShape> seqs) {
  switch (kv) {
    case DType::bf16:
      return run_attention<simd::LoadBF16>(seqs);
    case DType::f16:
      return run_attention<simd::LoadF16>(seqs);
    default:
      return run_attention<simd::LoadF32>(seqs);
  }
}

}  // namespace

// The op's composition (ops/composed/composed.h) over this backend's ops: no fused kernel pays on a CPU.
void attention_prep_varlen(const Tensor& qg, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                           const Tensor& k_norm, float eps, float weight_offset, std::span<const int32_t> positions,
                           std::span<const float> inv_freq, const Tensor& k_pages, const Tensor& v_pages,
                           const SeqBatch& batch, const Tensor& q, const Tensor& gate) {
  composed::attention_prep_varlen(*backend_for(Level::KAPITSA_CPU_LEVEL), qg, k, v, q_norm, k_norm, eps,
                                  weight_offset, positions, inv_freq, k_pages, v_pages, batch, q, gate);
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
