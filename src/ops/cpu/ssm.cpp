// CPU Mamba-2 selective scan in f32 SIMD with threads. Not the oracle (ops/ref is). Both op forms run
// the recurrence: each state row S_h[p, :] evolves independently (decay, rank-1 update, dot with C),
// so work splits over (head, block of rows) with no communication and a block stays in L1 for the
// whole token loop. On CPU the chunked SSD form does the same multiply-adds per token (Q·(N+P)/2 +
// 2·P·N vs 3·P·N) without the cache locality, as the GDN kernels found too; chunk_size is accepted
// and checked for interface parity with the oracle.
#include "base/thread_pool.h"
#include "ops/cpu/level.h"
#include "ops/cpu/simd.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {
namespace {

constexpr int64_t kRowsPerTask = 16;

// The dimensions of one (checked) ssd_scan call and where its x, B and C rows are: token t's x at
// x + t·x_stride ([H, P]), its B and C at B / C + t·bc_stride ([G, N]).
struct SsdDims {
  int64_t T, H, P, G, N, heads_per_group;
  const float *x, *B, *C;
  int64_t x_stride, bc_stride;
};

// x: [T, H, P];  B, C: [T, G, N].
SsdDims ssd_dims(const Tensor& x, const Tensor& B, const Tensor& C) {
  return {x.dim(0), x.dim(1), x.dim(2), B.dim(1), B.dim(2), x.dim(1) / B.dim(1),
          x.f32(),  B.f32(),  C.f32(),  x.dim(1) * x.dim(2), B.dim(1) * B.dim(2)};
}

// One sequence of a call: rows [row0, row0 + T) and its state [H, P, N]. Checkpoints: after token
// t ≥ ckpt_from the state is also copied into ckpt[t - ckpt_from].
struct SsdSeq {
  int64_t row0, T;
  float* state;
  int64_t ckpt_from = INT64_MAX;
  float* const* ckpt = nullptr;
};

// Every (sequence, head, block of state rows) task in one parallel loop; rows of the activations are
// indexed across the whole call (Δ and the decay are computed once per row and head).
void scan(const SsdDims& d, std::span<const SsdSeq> seqs, const Tensor& dt, const Tensor& A_log, const Tensor& D,
          const Tensor& dt_bias, float dt_min, float dt_max, const Tensor& y) {
  const int64_t P = d.P, N = d.N, H = d.H;
  // Δ and the per-token decay exp(Δ·A) for every (row, head), computed once.
  std::vector<float> delta(static_cast<size_t>(d.T * H)), decay(static_cast<size_t>(d.T * H));
  for (int64_t t = 0; t < d.T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float v = dt.f32()[t * H + h] + dt_bias.f32()[h];
      const float sp = v > 20.0f ? v : std::log1p(std::exp(v));
      const float dl = std::clamp(sp, dt_min, dt_max);
      delta[static_cast<size_t>(t * H + h)] = dl;
      decay[static_cast<size_t>(t * H + h)] = std::exp(dl * -std::exp(A_log.f32()[h]));
    }
  const int64_t blocks = (P + kRowsPerTask - 1) / kRowsPerTask, per_seq = H * blocks;
  float* py = y.f32();
  parallel_for(static_cast<size_t>(per_seq) * seqs.size(), 1, [&](size_t begin, size_t end) {
    using namespace simd;
    for (size_t task = begin; task < end; ++task) {
      const SsdSeq& sq = seqs[task / static_cast<size_t>(per_seq)];
      const int64_t local = static_cast<int64_t>(task % static_cast<size_t>(per_seq));
      const int64_t h = local / blocks, p0 = (local % blocks) * kRowsPerTask;
      const int64_t p1 = std::min(P, p0 + kRowsPerTask), g = h / d.heads_per_group;
      const float Dh = D.f32()[h];
      float* S = sq.state;
      for (int64_t tl = 0; tl < sq.T; ++tl) {
        const int64_t t = sq.row0 + tl;
        const float dl = delta[static_cast<size_t>(t * H + h)], a = decay[static_cast<size_t>(t * H + h)];
        const float* b = d.B + t * d.bc_stride + g * N;
        const float* c = d.C + t * d.bc_stride + g * N;
        const float* x = d.x + t * d.x_stride + h * P;
        const vf va = set1(a);
        for (int64_t p = p0; p < p1; ++p) {
          const float xp = x[p], coef = dl * xp;
          const vf vc = set1(coef);
          float* s = S + (h * P + p) * N;
          vf acc = zero();
          int64_t n = 0;
          for (; n + kW <= N; n += kW) {
            const vf sn = simd::fma(vc, load(b + n), mul(va, load(s + n)));
            store(s + n, sn);
            acc = simd::fma(sn, load(c + n), acc);
          }
          float sum = reduce_add(acc);
          for (; n < N; ++n) {
            s[n] = a * s[n] + coef * b[n];
            sum += s[n] * c[n];
          }
          py[(t * H + h) * P + p] = sum + Dh * xp;
        }
        if (tl >= sq.ckpt_from)
          std::memcpy(sq.ckpt[tl - sq.ckpt_from] + (h * P + p0) * N, S + (h * P + p0) * N,
                      static_cast<size_t>((p1 - p0) * N) * sizeof(float));
      }
    }
  });
}

}  // namespace

// x, y: [T, H, P];  dt: [T, H];  B, C: [T, G, N];  A_log, D, dt_bias: [H];  state: [H, P, N].
void ssd_scan_recurrent(const Tensor& x, const Tensor& dt, const Tensor& B, const Tensor& C, const Tensor& A_log,
                        const Tensor& D, const Tensor& dt_bias, float dt_min, float dt_max, const Tensor& state,
                        const Tensor& y) {
  const SsdSeq seq{0, x.dim(0), state.f32()};
  scan(ssd_dims(x, B, C), {&seq, 1}, dt, A_log, D, dt_bias, dt_min, dt_max, y);
}

void ssd_scan_chunked(const Tensor& x, const Tensor& dt, const Tensor& B, const Tensor& C, const Tensor& A_log,
                      const Tensor& D, const Tensor& dt_bias, float dt_min, float dt_max, int64_t chunk_size,
                      const Tensor& state, const Tensor& y) {
  const SsdSeq seq{0, x.dim(0), state.f32()};
  scan(ssd_dims(x, B, C), {&seq, 1}, dt, A_log, D, dt_bias, dt_min, dt_max, y);
}

// states: [n_slots, H, P, N].  Both forms are the recurrence here, so all sequences run as one scan, reading
// x, B and C in xbc's rows.
void ssd_scan_varlen(const Tensor& xbc, int64_t n_groups, const Tensor& dt, const Tensor& A_log, const Tensor& D,
                     const Tensor& dt_bias, float dt_min, float dt_max, int64_t chunk_size, const Tensor& states,
                     const SeqBatch& batch, const Tensor& y) {
  const int64_t H = states.dim(1), P = states.dim(2), N = states.dim(3), G = n_groups, width = xbc.dim(1);
  const SsdDims d{xbc.dim(0), H, P, G, N, H / G, xbc.f32(), xbc.f32() + H * P, xbc.f32() + H * P + G * N, width, width};
  const int64_t state_size = d.H * d.P * d.N;
  std::vector<float*> ckpt(batch.ckpt_slots.size());
  for (size_t c = 0; c < ckpt.size(); ++c) ckpt[c] = states.f32() + batch.ckpt_slots[c] * state_size;
  std::vector<SsdSeq> seqs;
  for (int64_t i = 0; i < batch.n_seqs(); ++i) {
    SsdSeq sq{batch.row_offsets[size_t(i)], batch.rows(i), states.f32() + batch.state_slots[size_t(i)] * state_size};
    if (batch.n_ckpts(i) > 0) {
      sq.ckpt_from = sq.T - batch.n_ckpts(i);
      sq.ckpt = ckpt.data() + batch.ckpt_offsets[size_t(i)];
    }
    seqs.push_back(sq);
  }
  scan(d, seqs, dt, A_log, D, dt_bias, dt_min, dt_max, y);
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
