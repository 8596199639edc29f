// CPU Gated DeltaNet: the gates and the delta rule in f32 with GCC/Clang vector extensions (AVX2 / NEON
// after -march) and threads from base/thread_pool. Not the oracle (ops/ref is). Both op forms run the
// recurrence (see gated_delta_rule_chunked for why). Key fact: every column j of a head's state S[:, j]
// evolves independently (u_j = Σ_i k_i S_ij, δ_j = (v_j − u_j) β), so work splits over (head, block of
// 32 columns) with no communication, and a block (Dk × 32 floats) stays in L1 for the whole token loop.
#include "ops/composed/composed.h"
#include "ops/cpu/level.h"

#include "base/thread_pool.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {
namespace {

using f32x8 = float __attribute__((vector_size(32)));
inline f32x8 load8(const float* p) {
  f32x8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, f32x8 v) { std::memcpy(p, &v, sizeof v); }

struct GdnDims {
  int64_t T, Hk, Hv, Dk, Dv, group;  // group = Hv / Hk value heads per key head
};

// The dimensions of one (checked) gated_delta_rule call.
GdnDims gdn_dims(const Tensor& q, const Tensor& v) {
  return {q.dim(0), q.dim(1), v.dim(1), q.dim(2), v.dim(2), v.dim(1) / q.dim(1)};
}

// ---- recurrent -----------------------------------------------------------------------------------

// One sequence of a call: its rows (T = d.T) and its state. Checkpoints: after token t ≥ ckpt_from the
// state is also copied into ckpt[t - ckpt_from] (each [Hv, Dk, Dv]).
struct RecurrentArgs {
  GdnDims d;
  const float *q, *k, *v, *g, *beta;
  float *state, *o;
  int64_t ckpt_from = INT64_MAX;
  float* const* ckpt = nullptr;
};

// k·q for one token (shared by every column block of a head).
inline float dot(const float* a, const float* b, int64_t n) {
  f32x8 acc = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc += load8(a + i) * load8(b + i);
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int l = 0; l < 8; ++l) s += acc[l];
  return s;
}

// Runs all T tokens for value head h on state columns [j0, j0 + 8·NV). Per token: one pass reading the
// block for u = α Sᵀk and α Sᵀq, then one pass writing S ← α S + k δᵀ; o = α Sᵀq + (k·q) δ is the same
// Sᵀq taken after the update, without a third pass. For T > 1 the block is first copied to contiguous
// scratch: in place its rows are Dv floats apart, which at Dv = 128 (512 B) maps all of them onto a
// few L1 sets and thrashes.
template <int NV>
void recurrent_block(const RecurrentArgs& a, int64_t h, int64_t j0, float* scratch) {
  const GdnDims& d = a.d;
  const int64_t kh = h / d.group;
  constexpr int64_t W = 8 * NV;
  float* const S_home = a.state + h * d.Dk * d.Dv + j0;
  const bool packed = d.T > 1;
  float* S = S_home;
  int64_t lds = d.Dv;
  if (packed) {
    for (int64_t i = 0; i < d.Dk; ++i) std::memcpy(scratch + i * W, S_home + i * d.Dv, sizeof(float) * W);
    S = scratch;
    lds = W;
  }
  for (int64_t t = 0; t < d.T; ++t) {
    const float* qt = a.q + (t * d.Hk + kh) * d.Dk;
    const float* kt = a.k + (t * d.Hk + kh) * d.Dk;
    const float* vt = a.v + (t * d.Hv + h) * d.Dv + j0;
    float* ot = a.o + (t * d.Hv + h) * d.Dv + j0;
    const float alpha = std::exp(a.g[t * d.Hv + h]);
    const float bt = a.beta[t * d.Hv + h];
    const float kq = dot(kt, qt, d.Dk);
    f32x8 u[NV] = {}, sq[NV] = {};
    for (int64_t i = 0; i < d.Dk; ++i) {
      const float* row = S + i * lds;
      for (int n = 0; n < NV; ++n) {
        const f32x8 s = load8(row + 8 * n);
        u[n] += kt[i] * s;
        sq[n] += qt[i] * s;
      }
    }
    f32x8 delta[NV];
    for (int n = 0; n < NV; ++n) {
      delta[n] = (load8(vt + 8 * n) - alpha * u[n]) * bt;
      store8(ot + 8 * n, alpha * sq[n] + kq * delta[n]);
    }
    for (int64_t i = 0; i < d.Dk; ++i) {
      float* row = S + i * lds;
      for (int n = 0; n < NV; ++n) store8(row + 8 * n, alpha * load8(row + 8 * n) + kt[i] * delta[n]);
    }
    if (t >= a.ckpt_from) {
      float* dst = a.ckpt[t - a.ckpt_from] + h * d.Dk * d.Dv + j0;
      for (int64_t i = 0; i < d.Dk; ++i) std::memcpy(dst + i * d.Dv, S + i * lds, sizeof(float) * W);
    }
  }
  if (packed)
    for (int64_t i = 0; i < d.Dk; ++i) std::memcpy(S_home + i * d.Dv, scratch + i * W, sizeof(float) * W);
}

// The same for one column (the tail when Dv is not a multiple of 8).
void recurrent_column(const RecurrentArgs& a, int64_t h, int64_t j) {
  const GdnDims& d = a.d;
  const int64_t kh = h / d.group;
  float* S = a.state + h * d.Dk * d.Dv + j;
  for (int64_t t = 0; t < d.T; ++t) {
    const float* qt = a.q + (t * d.Hk + kh) * d.Dk;
    const float* kt = a.k + (t * d.Hk + kh) * d.Dk;
    const float alpha = std::exp(a.g[t * d.Hv + h]);
    float u = 0, sq = 0, kq = 0;
    for (int64_t i = 0; i < d.Dk; ++i) {
      u += kt[i] * S[i * d.Dv];
      sq += qt[i] * S[i * d.Dv];
      kq += kt[i] * qt[i];
    }
    const float delta = (a.v[(t * d.Hv + h) * d.Dv + j] - alpha * u) * a.beta[t * d.Hv + h];
    a.o[(t * d.Hv + h) * d.Dv + j] = alpha * sq + kq * delta;
    for (int64_t i = 0; i < d.Dk; ++i) S[i * d.Dv] = alpha * S[i * d.Dv] + kt[i] * delta;
    if (t >= a.ckpt_from) {
      float* dst = a.ckpt[t - a.ckpt_from] + h * d.Dk * d.Dv + j;
      for (int64_t i = 0; i < d.Dk; ++i) dst[i * d.Dv] = S[i * d.Dv];
    }
  }
}

// Runs every (sequence, value head, block of 32 state columns) task of a call; the last block of a head
// also takes the < 32 leftover columns. Every sequence has the same head shape.
void run_column_blocks(std::span<const RecurrentArgs> seqs) {
  if (seqs.empty()) return;
  const GdnDims& d0 = seqs[0].d;
  constexpr int64_t kBlock = 32;
  const int64_t blocks = std::max<int64_t>(1, d0.Dv / kBlock), per_seq = d0.Hv * blocks;
  parallel_for(size_t(per_seq) * seqs.size(), 1, [&](size_t begin, size_t end) {
    std::vector<float> scratch(size_t(d0.Dk * kBlock));
    for (size_t task = begin; task < end; ++task) {
      const RecurrentArgs& a = seqs[task / size_t(per_seq)];
      if (a.d.T == 0) continue;
      const int64_t h = int64_t(task % size_t(per_seq)) / blocks, blk = int64_t(task % size_t(per_seq)) % blocks;
      int64_t j = blk * kBlock;
      const int64_t j_end = blk + 1 == blocks ? a.d.Dv : j + kBlock;
      for (; j + 32 <= j_end; j += 32) recurrent_block<4>(a, h, j, scratch.data());
      for (; j + 8 <= j_end; j += 8) recurrent_block<1>(a, h, j, scratch.data());
      for (; j < j_end; ++j) recurrent_column(a, h, j);
    }
  });
}

}  // namespace

void gdn_gates(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, const Tensor& g,
               const Tensor& beta) {
  // a, b, g, beta: [T, Hv];  A_log, dt_bias: [Hv]
  const int64_t Hv = A_log.numel();
  const float *pa = a.f32(), *pb = b.f32(), *pA = A_log.f32(), *pdt = dt_bias.f32();
  float *pg = g.f32(), *pbeta = beta.f32();
  std::vector<float> neg_decay(static_cast<size_t>(Hv));
  for (int64_t h = 0; h < Hv; ++h) neg_decay[size_t(h)] = -std::exp(pA[h]);
  const int64_t T = a.numel() / Hv;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t i = t * Hv + h;
      const float x = pa[i] + pdt[h], bb = pb[i];
      // Threshold 20 as torch / FLA / vLLM: beyond it log1p(exp(x)) == x in f32, and exp(x) may overflow.
      const float softplus = x > 20.0f ? x : std::log1p(std::exp(x));
      pg[i] = neg_decay[size_t(h)] * softplus;
      pbeta[i] = 1.0f / (1.0f + std::exp(-bb));
    }
}

void gated_delta_rule_recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                const Tensor& beta, const Tensor& state, const Tensor& o) {
  // q, k: [T, Hk, Dk];  v, o: [T, Hv, Dv];  g, beta: [T, Hv];  state: [Hv, Dk, Dv]
  const RecurrentArgs a{gdn_dims(q, v), q.f32(), k.f32(), v.f32(), g.f32(), beta.f32(), state.f32(), o.f32()};
  run_column_blocks({&a, 1});
}

// On the CPU the chunked (WY) form buys nothing: at Dk = Dv = 128 and chunks of 64 it does as many
// multiply-adds per token as the recurrence (~4.25 vs 4 per state element: W·S, Qe·S, Kdᵀ·V' plus the
// intra-chunk triangles), its advantage being the parallelism that GPUs need. Measured here (Zen 3,
// one thread, T = 512, 16 heads) a register-tiled WY implementation ran at 41 ms against 19.5 ms for
// the column-blocked recurrence, so prefill uses the recurrence too. (The WY code is in git history,
// commit 71c35e6.) The result is the same function (tests compare both to ref).
void gated_delta_rule_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& beta, const Tensor& state, const Tensor& o) {
  // q, k: [T, Hk, Dk];  v, o: [T, Hv, Dv];  g, beta: [T, Hv];  state: [Hv, Dk, Dv]
  gated_delta_rule_recurrent(q, k, v, g, beta, state, o);
}

// states: [n_slots, Hv, Dk, Dv].  Both forms are the recurrence here (above), so every sequence, any
// length, is one set of column-block tasks, all sequences in one parallel loop.
void gated_delta_rule_varlen(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                             const Tensor& states, const SeqBatch& batch, const Tensor& o) {
  const GdnDims d = gdn_dims(q, v);
  const int64_t n = batch.n_seqs(), state_size = d.Hv * d.Dk * d.Dv;
  std::vector<float*> ckpt(batch.ckpt_slots.size());
  for (size_t c = 0; c < ckpt.size(); ++c) ckpt[c] = states.f32() + batch.ckpt_slots[c] * state_size;
  std::vector<RecurrentArgs> seqs;
  seqs.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r0 = batch.row_offsets[size_t(i)];
    RecurrentArgs a{d,
                    q.f32() + r0 * d.Hk * d.Dk,
                    k.f32() + r0 * d.Hk * d.Dk,
                    v.f32() + r0 * d.Hv * d.Dv,
                    g.f32() + r0 * d.Hv,
                    beta.f32() + r0 * d.Hv,
                    states.f32() + batch.state_slots[size_t(i)] * state_size,
                    o.f32() + r0 * d.Hv * d.Dv};
    a.d.T = batch.rows(i);
    if (batch.n_ckpts(i) > 0) {
      a.ckpt_from = a.d.T - batch.n_ckpts(i);
      a.ckpt = ckpt.data() + batch.ckpt_offsets[size_t(i)];
    }
    seqs.push_back(a);
  }
  run_column_blocks(seqs);
}

// The op's composition (ops/composed/composed.h) over this backend's ops: no fused kernel pays on a CPU.
void gdn_core_varlen(const Tensor& qkv, const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                     const Tensor& z, const Tensor& norm_w, float norm_eps, const Tensor& states, const SeqBatch& batch,
                     const Tensor& o) {
  composed::gdn_core_varlen(*backend_for(Level::KAPITSA_CPU_LEVEL), qkv, a, b, A_log, dt_bias, z, norm_w, norm_eps,
                            states, batch, o);
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
