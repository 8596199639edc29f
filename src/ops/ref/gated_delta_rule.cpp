// Reference Gated DeltaNet: the gates, the token-by-token recurrence and the chunked (WY) form, written
// plainly in f64 so that "chunked == recurrent" tests the chunked algorithm itself. Not fast.
// Invariants: state is f32 [Hv, Dk, Dv] in/out (held in f64 during a call); value head h reads key head
// h / (Hv / Hk); the chunked form follows transformers' torch_chunk_gated_delta_rule (chunk 64) except
// that q arrives already scaled and a last partial chunk is processed at its own length (no padding).
#include "ops/composed/composed.h"
#include "ops/ref/ref.h"
#include "ops/ref/ref_util.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kapitsa::ops::ref {
namespace {

constexpr int64_t kChunk = 64;

struct GdnDims {
  int64_t T, Hk, Hv, Dk, Dv, group;  // group = Hv / Hk value heads per key head
};

// The dimensions of one (checked) gated_delta_rule call.
GdnDims gdn_dims(const Tensor& q, const Tensor& v) {
  return {q.dim(0), q.dim(1), v.dim(1), q.dim(2), v.dim(2), v.dim(1) / q.dim(1)};
}

}  // namespace

void gdn_gates(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, const Tensor& g,
               const Tensor& beta) {
  // a, b, g, beta: [T, Hv];  A_log, dt_bias: [Hv]
  const int64_t Hv = A_log.numel();
  const float* pa = a.f32();
  const float* pb = b.f32();
  const float* pA = A_log.f32();
  const float* pdt = dt_bias.f32();
  float* pg = g.f32();
  float* pbeta = beta.f32();
  for (int64_t i = 0; i < a.numel(); ++i) {
    const int64_t h = i % Hv;
    const double x = static_cast<double>(pa[i]) + pdt[h];
    const double bb = pb[i];
    const double softplus = x > 20.0 ? x : std::log1p(std::exp(x));
    pg[i] = static_cast<float>(-std::exp(static_cast<double>(pA[h])) * softplus);
    pbeta[i] = static_cast<float>(1.0 / (1.0 + std::exp(-bb)));
  }
}

void gated_delta_rule_recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                const Tensor& beta, const Tensor& state, const Tensor& o) {
  // q, k: [T, Hk, Dk];  v, o: [T, Hv, Dv];  g, beta: [T, Hv];  state: [Hv, Dk, Dv]
  const GdnDims d = gdn_dims(q, v);
  const float *pq = q.f32(), *pk = k.f32(), *pv = v.f32(), *pg = g.f32(), *pbeta = beta.f32();
  float *ps = state.f32(), *po = o.f32();
  std::vector<double> S(static_cast<size_t>(d.Dk * d.Dv)), u(static_cast<size_t>(d.Dv));
  for (int64_t h = 0; h < d.Hv; ++h) {
    const int64_t kh = h / d.group;
    float* sh = ps + h * d.Dk * d.Dv;
    for (int64_t i = 0; i < d.Dk * d.Dv; ++i) S[static_cast<size_t>(i)] = sh[i];
    for (int64_t t = 0; t < d.T; ++t) {
      const float* qt = pq + (t * d.Hk + kh) * d.Dk;
      const float* kt = pk + (t * d.Hk + kh) * d.Dk;
      const float* vt = pv + (t * d.Hv + h) * d.Dv;
      const double alpha = std::exp(static_cast<double>(pg[t * d.Hv + h]));
      const double bt = pbeta[t * d.Hv + h];
      // S ← α S;  u = Sᵀ k
      std::fill(u.begin(), u.end(), 0.0);
      for (int64_t i = 0; i < d.Dk; ++i)
        for (int64_t j = 0; j < d.Dv; ++j) {
          double& s = S[static_cast<size_t>(i * d.Dv + j)];
          s *= alpha;
          u[static_cast<size_t>(j)] += s * kt[i];
        }
      // δ = (v − u) β;  S ← S + k δᵀ  (u is reused to hold δ)
      for (int64_t j = 0; j < d.Dv; ++j) u[static_cast<size_t>(j)] = (vt[j] - u[static_cast<size_t>(j)]) * bt;
      for (int64_t i = 0; i < d.Dk; ++i)
        for (int64_t j = 0; j < d.Dv; ++j) S[static_cast<size_t>(i * d.Dv + j)] += kt[i] * u[static_cast<size_t>(j)];
      // o = Sᵀ q
      float* ot = po + (t * d.Hv + h) * d.Dv;
      for (int64_t j = 0; j < d.Dv; ++j) {
        double acc = 0;
        for (int64_t i = 0; i < d.Dk; ++i) acc += S[static_cast<size_t>(i * d.Dv + j)] * qt[i];
        ot[j] = static_cast<float>(acc);
      }
    }
    for (int64_t i = 0; i < d.Dk * d.Dv; ++i) sh[i] = static_cast<float>(S[static_cast<size_t>(i)]);
  }
}

void gated_delta_rule_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& beta, const Tensor& state, const Tensor& o) {
  // q, k: [T, Hk, Dk];  v, o: [T, Hv, Dv];  g, beta: [T, Hv];  state: [Hv, Dk, Dv]
  const GdnDims d = gdn_dims(q, v);
  const float *pq = q.f32(), *pk = k.f32(), *pv = v.f32(), *pg = g.f32(), *pbeta = beta.f32();
  float *ps = state.f32(), *po = o.f32();
  const int64_t C = kChunk, Dk = d.Dk, Dv = d.Dv;
  using Mat = std::vector<double>;
  auto at = [](Mat& m, int64_t cols, int64_t r, int64_t c) -> double& { return m[static_cast<size_t>(r * cols + c)]; };
  Mat S(static_cast<size_t>(Dk * Dv)), gam(static_cast<size_t>(C)), Tm(static_cast<size_t>(C * C));
  Mat U(static_cast<size_t>(C * Dv)), W(static_cast<size_t>(C * Dk)), Vn(static_cast<size_t>(C * Dv));
  Mat S_next(static_cast<size_t>(Dk * Dv));

  for (int64_t h = 0; h < d.Hv; ++h) {
    const int64_t kh = h / d.group;
    float* sh = ps + h * Dk * Dv;
    for (int64_t i = 0; i < Dk * Dv; ++i) S[static_cast<size_t>(i)] = sh[i];
    auto qv = [&](int64_t t, int64_t i) -> double { return pq[(t * d.Hk + kh) * Dk + i]; };
    auto kv = [&](int64_t t, int64_t i) -> double { return pk[(t * d.Hk + kh) * Dk + i]; };
    auto vv = [&](int64_t t, int64_t j) -> double { return pv[(t * d.Hv + h) * Dv + j]; };

    for (int64_t c0 = 0; c0 < d.T; c0 += C) {
      const int64_t L = std::min(C, d.T - c0);  // a last partial chunk acts like zero-padding (g=0, β=0, k=0)
      auto bt = [&](int64_t i) -> double { return pbeta[(c0 + i) * d.Hv + h]; };
      // γ_i = Σ_{j≤i} g_j (chunk-local cumulative log decay)
      double acc = 0;
      for (int64_t i = 0; i < L; ++i) {
        acc += pg[(c0 + i) * d.Hv + h];
        gam[static_cast<size_t>(i)] = acc;
      }
      // Tm = (I + A)⁻¹ with A_ij = β_i (k_i·k_j) exp(γ_i − γ_j) for i > j, by HF's row recursion:
      // start from −A (strictly lower), row i += Σ_j row_i[j] · row_j (rows j < i already final), then + I.
      // exp is taken only for i > j, where γ_i − γ_j ≤ 0, so nothing overflows.
      std::fill(Tm.begin(), Tm.end(), 0.0);
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < i; ++j) {
          double dot = 0;
          for (int64_t x = 0; x < Dk; ++x) dot += kv(c0 + i, x) * kv(c0 + j, x);
          at(Tm, C, i, j) = -bt(i) * dot * std::exp(gam[static_cast<size_t>(i)] - gam[static_cast<size_t>(j)]);
        }
      for (int64_t i = 1; i < L; ++i) {
        std::vector<double> row(static_cast<size_t>(i));
        for (int64_t m = 0; m < i; ++m) {
          double s = at(Tm, C, i, m);
          for (int64_t j = m + 1; j < i; ++j) s += at(Tm, C, i, j) * at(Tm, C, j, m);
          row[static_cast<size_t>(m)] = s;
        }
        for (int64_t m = 0; m < i; ++m) at(Tm, C, i, m) = row[static_cast<size_t>(m)];
      }
      for (int64_t i = 0; i < L; ++i) at(Tm, C, i, i) = 1.0;
      // U = Tm (β ⊙ V);  W = Tm (β ⊙ K ⊙ exp(γ))   ("value" and "k_cumdecay" in HF)
      for (int64_t i = 0; i < L; ++i) {
        for (int64_t j = 0; j < Dv; ++j) {
          double s = 0;
          for (int64_t m = 0; m <= i; ++m) s += at(Tm, C, i, m) * bt(m) * vv(c0 + m, j);
          at(U, Dv, i, j) = s;
        }
        for (int64_t x = 0; x < Dk; ++x) {
          double s = 0;
          for (int64_t m = 0; m <= i; ++m)
            s += at(Tm, C, i, m) * bt(m) * kv(c0 + m, x) * std::exp(gam[static_cast<size_t>(m)]);
          at(W, Dk, i, x) = s;
        }
      }
      // V' = U − W S
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < Dv; ++j) {
          double s = at(U, Dv, i, j);
          for (int64_t x = 0; x < Dk; ++x) s -= at(W, Dk, i, x) * at(S, Dv, x, j);
          at(Vn, Dv, i, j) = s;
        }
      // O = (Q ⊙ exp(γ)) S + [(Q Kᵀ) ⊙ exp(γ_i − γ_j) ⊙ 1_{i≥j}] V'
      for (int64_t i = 0; i < L; ++i) {
        const double eg = std::exp(gam[static_cast<size_t>(i)]);
        std::vector<double> p(static_cast<size_t>(i + 1));
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t x = 0; x < Dk; ++x) dot += qv(c0 + i, x) * kv(c0 + j, x);
          p[static_cast<size_t>(j)] = dot * std::exp(gam[static_cast<size_t>(i)] - gam[static_cast<size_t>(j)]);
        }
        float* oi = po + ((c0 + i) * d.Hv + h) * Dv;
        for (int64_t j = 0; j < Dv; ++j) {
          double s = 0;
          for (int64_t x = 0; x < Dk; ++x) s += qv(c0 + i, x) * eg * at(S, Dv, x, j);
          for (int64_t m = 0; m <= i; ++m) s += p[static_cast<size_t>(m)] * at(Vn, Dv, m, j);
          oi[j] = static_cast<float>(s);
        }
      }
      // S ← exp(γ_L) S + (K ⊙ exp(γ_L − γ))ᵀ V'
      const double gl = gam[static_cast<size_t>(L - 1)];
      for (int64_t x = 0; x < Dk; ++x)
        for (int64_t j = 0; j < Dv; ++j) {
          double s = std::exp(gl) * at(S, Dv, x, j);
          for (int64_t m = 0; m < L; ++m)
            s += kv(c0 + m, x) * std::exp(gl - gam[static_cast<size_t>(m)]) * at(Vn, Dv, m, j);
          at(S_next, Dv, x, j) = s;
        }
      S.swap(S_next);
    }
    for (int64_t i = 0; i < Dk * Dv; ++i) sh[i] = static_cast<float>(S[static_cast<size_t>(i)]);
  }
}

// states: [n_slots, Hv, Dk, Dv].  Each sequence: the recurrent form for one token, the chunked form for
// more, up to its checkpoints; then token by token (recurrent), copying the state after each.
void gated_delta_rule_varlen(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                             const Tensor& states, const SeqBatch& batch, const Tensor& o) {
  for (int64_t i = 0; i < batch.n_seqs(); ++i) {
    const int64_t r0 = batch.row_offsets[size_t(i)], n = batch.n_ckpts(i), r1 = r0 + batch.rows(i) - n;
    const Tensor state = states.index(batch.state_slots[size_t(i)]);
    auto run = [&](int64_t a, int64_t b) {
      auto form = b - a == 1 ? gated_delta_rule_recurrent : gated_delta_rule_chunked;
      form(q.rows(a, b), k.rows(a, b), v.rows(a, b), g.rows(a, b), beta.rows(a, b), state, o.rows(a, b));
    };
    if (r1 > r0) run(r0, r1);
    for (int64_t j = 0; j < n; ++j) {
      run(r1 + j, r1 + j + 1);
      detail::copy_bytes(state, states.index(batch.ckpt_slot(i, j)));
    }
  }
}

void gdn_core_varlen(const Tensor& qkv, const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                     const Tensor& z, const Tensor& norm_w, float norm_eps, const Tensor& states, const SeqBatch& batch,
                     const Tensor& o) {
  composed::gdn_core_varlen(*backend(), qkv, a, b, A_log, dt_bias, z, norm_w, norm_eps, states, batch, o);
}

}  // namespace kapitsa::ops::ref
