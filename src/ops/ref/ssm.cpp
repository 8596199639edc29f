// Reference Mamba-2 selective scan (SSD): the token-by-token recurrence and the chunked SSD algorithm
// of mamba_ssm (intra-chunk "attention" through the decay matrix L, inter-chunk state passing), both
// in double over f32 inputs. The two forms share nothing but the Δ preprocessing, so testing one
// against the other checks the chunked algebra. The state stays f32 between calls, as in a real cache.
#include "ops/ref/ref.h"
#include "ops/ref/ref_util.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kapitsa::ops::ref {
namespace {

struct SsdDims {
  int64_t T, H, P, G, N, heads_per_group;
};

// The dimensions of one (checked) ssd_scan call.
SsdDims ssd_dims(const Tensor& x, const Tensor& B) {
  return {x.dim(0), x.dim(1), x.dim(2), B.dim(1), B.dim(2), x.dim(1) / B.dim(1)};
}

// Δ for token t, head h.
double delta(const Tensor& dt, const Tensor& dt_bias, int64_t t, int64_t h, int64_t H, float dt_min, float dt_max) {
  const double v = static_cast<double>(dt.f32()[t * H + h]) + dt_bias.f32()[h];
  const double sp = v > 20.0 ? v : std::log1p(std::exp(v));
  return std::clamp(sp, static_cast<double>(dt_min), static_cast<double>(dt_max));
}

}  // namespace

// x, y: [T, H, P];  dt: [T, H];  B, C: [T, G, N];  A_log, D, dt_bias: [H];  state: [H, P, N].
void ssd_scan_recurrent(const Tensor& x, const Tensor& dt, const Tensor& B, const Tensor& C, const Tensor& A_log,
                        const Tensor& D, const Tensor& dt_bias, float dt_min, float dt_max, const Tensor& state,
                        const Tensor& y) {
  const SsdDims d = ssd_dims(x, B);
  const float *px = x.f32(), *pB = B.f32(), *pC = C.f32();
  float *S = state.f32(), *py = y.f32();
  for (int64_t t = 0; t < d.T; ++t)
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t g = h / d.heads_per_group;
      const double dlt = delta(dt, dt_bias, t, h, d.H, dt_min, dt_max);
      const double decay = std::exp(dlt * -std::exp(static_cast<double>(A_log.f32()[h])));
      const float* b = pB + (t * d.G + g) * d.N;
      const float* c = pC + (t * d.G + g) * d.N;
      for (int64_t p = 0; p < d.P; ++p) {
        const double xp = px[(t * d.H + h) * d.P + p];
        float* s = S + (h * d.P + p) * d.N;
        double acc = 0;
        for (int64_t n = 0; n < d.N; ++n) {
          s[n] = static_cast<float>(decay * s[n] + dlt * xp * b[n]);
          acc += static_cast<double>(s[n]) * c[n];
        }
        py[(t * d.H + h) * d.P + p] = static_cast<float>(acc + static_cast<double>(D.f32()[h]) * xp);
      }
    }
}

// Same shapes; chunks of chunk_size tokens counted from the first token of this call.
void ssd_scan_chunked(const Tensor& x, const Tensor& dt, const Tensor& B, const Tensor& C, const Tensor& A_log,
                      const Tensor& D, const Tensor& dt_bias, float dt_min, float dt_max, int64_t chunk_size,
                      const Tensor& state, const Tensor& y) {
  const SsdDims d = ssd_dims(x, B);
  const float *px = x.f32(), *pB = B.f32(), *pC = C.f32();
  float *S = state.f32(), *py = y.f32();
  const int64_t P = d.P, N = d.N;
  std::vector<double> cum, dl, s_prev(static_cast<size_t>(P * N)), s_new(static_cast<size_t>(P * N));
  for (int64_t h = 0; h < d.H; ++h) {
    const int64_t g = h / d.heads_per_group;
    const double A = -std::exp(static_cast<double>(A_log.f32()[h]));
    auto xv = [&](int64_t t, int64_t p) { return static_cast<double>(px[(t * d.H + h) * P + p]); };
    auto bv = [&](int64_t t, int64_t n) { return static_cast<double>(pB[(t * d.G + g) * N + n]); };
    auto cv = [&](int64_t t, int64_t n) { return static_cast<double>(pC[(t * d.G + g) * N + n]); };
    for (int64_t i = 0; i < P * N; ++i) s_prev[static_cast<size_t>(i)] = S[h * P * N + i];

    for (int64_t t0 = 0; t0 < d.T; t0 += chunk_size) {
      const int64_t Q = std::min(chunk_size, d.T - t0);
      // Within-chunk cumulative log-decay: cum[l] = Σ_{s≤l} Δ_s A.
      cum.assign(static_cast<size_t>(Q), 0.0);
      dl.assign(static_cast<size_t>(Q), 0.0);
      double run = 0;
      for (int64_t l = 0; l < Q; ++l) {
        dl[static_cast<size_t>(l)] = delta(dt, dt_bias, t0 + l, h, d.H, dt_min, dt_max);
        run += dl[static_cast<size_t>(l)] * A;
        cum[static_cast<size_t>(l)] = run;
      }
      // Outputs: Y_diag (intra-chunk, L_ls = exp(cum_l − cum_s) for s ≤ l) + Y_off (from the carried state).
      for (int64_t l = 0; l < Q; ++l) {
        const int64_t tl = t0 + l;
        std::vector<double> w(static_cast<size_t>(l + 1));
        for (int64_t s = 0; s <= l; ++s) {
          double cb = 0;
          for (int64_t n = 0; n < N; ++n) cb += cv(tl, n) * bv(t0 + s, n);
          w[static_cast<size_t>(s)] = cb * std::exp(cum[static_cast<size_t>(l)] - cum[static_cast<size_t>(s)]) *
                                      dl[static_cast<size_t>(s)];
        }
        const double out_decay = std::exp(cum[static_cast<size_t>(l)]);
        for (int64_t p = 0; p < P; ++p) {
          double acc = 0;
          for (int64_t s = 0; s <= l; ++s) acc += w[static_cast<size_t>(s)] * xv(t0 + s, p);
          double off = 0;
          for (int64_t n = 0; n < N; ++n) off += cv(tl, n) * s_prev[static_cast<size_t>(p * N + n)];
          py[(tl * d.H + h) * P + p] =
              static_cast<float>(acc + out_decay * off + static_cast<double>(D.f32()[h]) * xv(tl, p));
        }
      }
      // State passing: S ← exp(cum_end) S + Σ_s exp(cum_end − cum_s) Δ_s x_s ⊗ B_s.
      const double end = cum[static_cast<size_t>(Q - 1)];
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n) {
          double acc = std::exp(end) * s_prev[static_cast<size_t>(p * N + n)];
          for (int64_t s = 0; s < Q; ++s)
            acc += std::exp(end - cum[static_cast<size_t>(s)]) * dl[static_cast<size_t>(s)] * xv(t0 + s, p) *
                   bv(t0 + s, n);
          s_new[static_cast<size_t>(p * N + n)] = acc;
        }
      std::swap(s_prev, s_new);
    }
    for (int64_t i = 0; i < P * N; ++i) S[h * P * N + i] = static_cast<float>(s_prev[static_cast<size_t>(i)]);
  }
}

// states: [n_slots, H, P, N].  xbc split into x, B and C first; then as gated_delta_rule_varlen: recurrent
// for one token, chunked for more, up to the checkpoints, then token by token copying the state after each.
void ssd_scan_varlen(const Tensor& xbc, int64_t n_groups, const Tensor& dt, const Tensor& A_log, const Tensor& D,
                     const Tensor& dt_bias, float dt_min, float dt_max, int64_t chunk_size, const Tensor& states,
                     const SeqBatch& batch, const Tensor& y) {
  const int64_t T = xbc.dim(0), H = states.dim(1), P = states.dim(2), N = states.dim(3), G = n_groups;
  std::vector<float> split(static_cast<size_t>(xbc.numel()));
  const Tensor x(DType::f32, {T, H, P}, split.data()), B(DType::f32, {T, G, N}, split.data() + T * H * P),
      C(DType::f32, {T, G, N}, split.data() + T * (H * P + G * N));
  const Tensor parts[] = {x.reshape({T, H * P}), B.reshape({T, G * N}), C.reshape({T, G * N})};
  split_columns(xbc, parts);
  for (int64_t i = 0; i < batch.n_seqs(); ++i) {
    const int64_t r0 = batch.row_offsets[size_t(i)], n = batch.n_ckpts(i), r1 = r0 + batch.rows(i) - n;
    const Tensor state = states.index(batch.state_slots[size_t(i)]);
    auto run = [&](int64_t a, int64_t b) {
      if (b - a == 1)
        ssd_scan_recurrent(x.rows(a, b), dt.rows(a, b), B.rows(a, b), C.rows(a, b), A_log, D, dt_bias, dt_min, dt_max,
                           state, y.rows(a, b));
      else
        ssd_scan_chunked(x.rows(a, b), dt.rows(a, b), B.rows(a, b), C.rows(a, b), A_log, D, dt_bias, dt_min, dt_max,
                         chunk_size, state, y.rows(a, b));
    };
    if (r1 > r0) run(r0, r1);
    for (int64_t j = 0; j < n; ++j) {
      run(r1 + j, r1 + j + 1);
      detail::copy_bytes(state, states.index(batch.ckpt_slot(i, j)));
    }
  }
}

}  // namespace kapitsa::ops::ref
