// CPU Mamba-2 selective scan in f32 SIMD with threads. Not the oracle (ops/ref is). Both op forms run
// the recurrence: each state row S_h[p, :] evolves independently (decay, rank-1 update, dot with C),
// so work splits over (head, block of rows) with no communication and a block stays in L1 for the
// whole token loop. On CPU the chunked SSD form does the same multiply-adds per token (Q·(N+P)/2 +
// 2·P·N vs 3·P·N) without the cache locality, as the GDN kernels found too; chunk_size is accepted
// and checked for interface parity with the oracle.
#include "base/thread_pool.h"
#include "ops/cpu/cpu.h"
#include "ops/cpu/simd.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kapitsa::ops::cpu {
namespace {

constexpr int64_t kRowsPerTask = 16;

struct SsdDims {
  int64_t T, H, P, G, N, heads_per_group;
};

// The dimensions of one (checked) ssd_scan call.
SsdDims ssd_dims(const Tensor& x, const Tensor& B) {
  return {x.dim(0), x.dim(1), x.dim(2), B.dim(1), B.dim(2), x.dim(1) / B.dim(1)};
}

void scan(const SsdDims& d, const Tensor& x, const Tensor& dt, const Tensor& B, const Tensor& C, const Tensor& A_log,
          const Tensor& D, const Tensor& dt_bias, float dt_min, float dt_max, const Tensor& state, const Tensor& y) {
  const int64_t P = d.P, N = d.N, H = d.H;
  // Δ and the per-token decay exp(Δ·A) for every (token, head), computed once.
  std::vector<float> delta(static_cast<size_t>(d.T * H)), decay(static_cast<size_t>(d.T * H));
  for (int64_t t = 0; t < d.T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float v = dt.f32()[t * H + h] + dt_bias.f32()[h];
      const float sp = v > 20.0f ? v : std::log1p(std::exp(v));
      const float dl = std::clamp(sp, dt_min, dt_max);
      delta[static_cast<size_t>(t * H + h)] = dl;
      decay[static_cast<size_t>(t * H + h)] = std::exp(dl * -std::exp(A_log.f32()[h]));
    }
  const int64_t blocks = (P + kRowsPerTask - 1) / kRowsPerTask;
  const float *px = x.f32(), *pB = B.f32(), *pC = C.f32();
  float *S = state.f32(), *py = y.f32();
  parallel_for(static_cast<size_t>(H * blocks), 1, [&](size_t begin, size_t end) {
    using namespace simd;
    for (size_t task = begin; task < end; ++task) {
      const int64_t h = static_cast<int64_t>(task) / blocks, p0 = (static_cast<int64_t>(task) % blocks) * kRowsPerTask;
      const int64_t p1 = std::min(P, p0 + kRowsPerTask), g = h / d.heads_per_group;
      const float Dh = D.f32()[h];
      for (int64_t t = 0; t < d.T; ++t) {
        const float dl = delta[static_cast<size_t>(t * H + h)], a = decay[static_cast<size_t>(t * H + h)];
        const float* b = pB + (t * d.G + g) * N;
        const float* c = pC + (t * d.G + g) * N;
        const vf va = set1(a);
        for (int64_t p = p0; p < p1; ++p) {
          const float xp = px[(t * H + h) * P + p], coef = dl * xp;
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
      }
    }
  });
}

}  // namespace

// x, y: [T, H, P];  dt: [T, H];  B, C: [T, G, N];  A_log, D, dt_bias: [H];  state: [H, P, N].
void ssd_scan_recurrent(const Tensor& x, const Tensor& dt, const Tensor& B, const Tensor& C, const Tensor& A_log,
                        const Tensor& D, const Tensor& dt_bias, float dt_min, float dt_max, const Tensor& state,
                        const Tensor& y) {
  const SsdDims d = ssd_dims(x, B);
  scan(d, x, dt, B, C, A_log, D, dt_bias, dt_min, dt_max, state, y);
}

void ssd_scan_chunked(const Tensor& x, const Tensor& dt, const Tensor& B, const Tensor& C, const Tensor& A_log,
                      const Tensor& D, const Tensor& dt_bias, float dt_min, float dt_max, int64_t chunk_size,
                      const Tensor& state, const Tensor& y) {
  const SsdDims d = ssd_dims(x, B);
  scan(d, x, dt, B, C, A_log, D, dt_bias, dt_min, dt_max, state, y);
}

}  // namespace kapitsa::ops::cpu
