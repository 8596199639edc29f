// CPU Gated DeltaNet: the gates, the recurrent form (decode) and the chunked WY form (prefill), in f32
// with GCC/Clang vector extensions (AVX2 / NEON after -march) and threads from base/thread_pool.
// Not the oracle (ops/ref is). Key fact used by both forms: every column j of a head's state S[:, j]
// evolves independently (u_j = Σ_i k_i S_ij, δ_j = (v_j − u_j) β), so work splits over (head, column
// block) with no communication, and a block of columns stays in L1 for the whole token loop.
#include "ops/cpu/cpu.h"

#include "base/thread_pool.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace kapitsa::ops::cpu {
namespace {

constexpr int64_t kChunk = 64;

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

// Validates the shapes of one gated_delta_rule call (see op_list.inc) and returns its dimensions.
GdnDims check_gdn(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                  const Tensor& state, const Tensor& o) {
  for (const Tensor* t : {&q, &k, &v, &g, &beta, &state, &o})
    KAPITSA_CHECK(t->dtype() == DType::f32 && t->device() == Device::cpu, "gated_delta_rule: tensors must be F32 on cpu");
  KAPITSA_CHECK(q.rank() == 3 && k.shape() == q.shape(), "gated_delta_rule: q {} k {}", q.shape().str(),
                k.shape().str());
  KAPITSA_CHECK(v.rank() == 3 && o.shape() == v.shape() && v.dim(0) == q.dim(0), "gated_delta_rule: v {} o {} q {}",
                v.shape().str(), o.shape().str(), q.shape().str());
  GdnDims d{q.dim(0), q.dim(1), v.dim(1), q.dim(2), v.dim(2), 0};
  KAPITSA_CHECK(d.Hk > 0 && d.Hv % d.Hk == 0, "gated_delta_rule: Hv {} not a multiple of Hk {}", d.Hv, d.Hk);
  KAPITSA_CHECK(g.numel() == d.T * d.Hv && beta.numel() == d.T * d.Hv, "gated_delta_rule: g {} beta {} for T={} Hv={}",
                g.shape().str(), beta.shape().str(), d.T, d.Hv);
  KAPITSA_CHECK(state.rank() == 3 && state.dim(0) == d.Hv && state.dim(1) == d.Dk && state.dim(2) == d.Dv,
                "gated_delta_rule: state {} for Hv={} Dk={} Dv={}", state.shape().str(), d.Hv, d.Dk, d.Dv);
  d.group = d.Hv / d.Hk;
  return d;
}

// ---- recurrent -----------------------------------------------------------------------------------

struct RecurrentArgs {
  GdnDims d;
  const float *q, *k, *v, *g, *beta;
  float *state, *o;
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
  }
}

// ---- chunked: a small f32 GEMM -------------------------------------------------------------------

// C[M, N] = (accumulate ? C : 0) + alpha · A[M, K] · B[K, N]; row-major with leading dimensions.
// If a_lower, A is lower triangular (A[i, x] = 0 for x > i) and those products are skipped.
// A is addressed as A[i·lda + x·sa] so that a transposed A needs no copy (lda = 1, sa = its row length).
// Register tile of R rows × 8·NV columns over a packed B panel (ldb = 8·NV).
template <int R, int NV>
inline void gemm_tile(int64_t K, float alpha, const float* A, int64_t lda, int64_t sa, const float* B, float* C,
                      int64_t ldc, bool accumulate) {
  f32x8 c[R][NV] = {};
  for (int64_t x = 0; x < K; ++x) {
    f32x8 b[NV];
    for (int n = 0; n < NV; ++n) b[n] = load8(B + x * 8 * NV + 8 * n);
    for (int r = 0; r < R; ++r) {
      const float ar = A[r * lda + x * sa];
      for (int n = 0; n < NV; ++n) c[r][n] += ar * b[n];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) {
      float* p = C + r * ldc + 8 * n;
      store8(p, accumulate ? load8(p) + alpha * c[r][n] : alpha * c[r][n]);
    }
}

// One panel of 8·NV columns: B[:, j0 : j0 + 8·NV] is copied to contiguous scratch first, since B's rows
// are often 512 B apart (Dv = 128), which thrashes a few L1 sets when read down the K dimension.
template <int NV>
void gemm_panel(int64_t M, int64_t K, float alpha, const float* A, int64_t lda, int64_t sa, const float* B,
                int64_t ldb, float* C, int64_t ldc, bool accumulate, bool a_lower, float* pack) {
  constexpr int64_t W = 8 * NV;
  for (int64_t x = 0; x < K; ++x) std::memcpy(pack + x * W, B + x * ldb, sizeof(float) * W);
  int64_t i = 0;
  for (; i + 4 <= M; i += 4)
    gemm_tile<4, NV>(a_lower ? std::min(K, i + 4) : K, alpha, A + i * lda, lda, sa, pack, C + i * ldc, ldc, accumulate);
  for (; i < M; ++i)
    gemm_tile<1, NV>(a_lower ? std::min(K, i + 1) : K, alpha, A + i * lda, lda, sa, pack, C + i * ldc, ldc, accumulate);
}

void gemm(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, int64_t sa, const float* B,
          int64_t ldb, float* C, int64_t ldc, bool accumulate, bool a_lower = false) {
  thread_local std::vector<float> pack;
  if (pack.size() < size_t(K * 16)) pack.resize(size_t(K * 16));
  int64_t j = 0;
  for (; j + 16 <= N; j += 16) gemm_panel<2>(M, K, alpha, A, lda, sa, B + j, ldb, C + j, ldc, accumulate, a_lower, pack.data());
  for (; j + 8 <= N; j += 8) gemm_panel<1>(M, K, alpha, A, lda, sa, B + j, ldb, C + j, ldc, accumulate, a_lower, pack.data());
  for (; j < N; ++j)
    for (int64_t i = 0; i < M; ++i) {
      float s = 0;
      for (int64_t x = 0; x < (a_lower ? std::min(K, i + 1) : K); ++x) s += A[i * lda + x * sa] * B[x * ldb + j];
      float& c = C[i * ldc + j];
      c = accumulate ? c + alpha * s : alpha * s;
    }
}

// ---- chunked: one head -------------------------------------------------------------------------

// Scratch for one head's chunk loop (sizes for a full chunk of C rows). Everything is row-major by
// token, written row by row (no transposes: those scatter across L1 sets).
struct ChunkScratch {
  std::vector<float> qk, decay, tm, xv, xk, u, w, qe, kd, vn;
  ChunkScratch(int64_t C, int64_t Dk, int64_t Dv)
      : qk(size_t(C * C)), decay(size_t(C * C)), tm(size_t(C * C)), xv(size_t(C * Dv)), xk(size_t(C * Dk)),
        u(size_t(C * Dv)), w(size_t(C * Dk)), qe(size_t(C * Dk)), kd(size_t(C * Dk)), vn(size_t(C * Dv)) {}
};

// The chunked WY algorithm (ops/ref and architectures.md §4.1) for value head h, all chunks in order.
void chunked_head(const RecurrentArgs& a, int64_t h, ChunkScratch& sc) {
  const GdnDims& d = a.d;
  const int64_t kh = h / d.group, Dk = d.Dk, Dv = d.Dv, C = kChunk;
  const int64_t ldk = d.Hk * Dk, ldv = d.Hv * Dv;  // token strides of q/k and v/o
  float* S = a.state + h * Dk * Dv;
  float gam[kChunk], bt[kChunk];
  for (int64_t c0 = 0; c0 < d.T; c0 += C) {
    const int64_t L = std::min(C, d.T - c0);  // a last partial chunk is exact: no padding needed
    const float* K = a.k + c0 * ldk + kh * Dk;
    const float* Q = a.q + c0 * ldk + kh * Dk;
    const float* V = a.v + c0 * ldv + h * Dv;
    float* O = a.o + c0 * ldv + h * Dv;
    float acc = 0;
    for (int64_t i = 0; i < L; ++i) {
      gam[i] = acc += a.g[(c0 + i) * d.Hv + h];
      bt[i] = a.beta[(c0 + i) * d.Hv + h];
    }
    const float gl = gam[L - 1];
    // The next chunk's rows are Hk·Dk / Hv·Dv floats apart (new pages), which the hardware prefetcher does
    // not follow; ask for them now so they arrive while this chunk computes.
    for (int64_t i = L; i < std::min(2 * C, d.T - c0); ++i) {
      for (int64_t x = 0; x < Dk; x += 16) {
        __builtin_prefetch(K + i * ldk + x);
        __builtin_prefetch(Q + i * ldk + x);
      }
      for (int64_t j = 0; j < Dv; j += 16) __builtin_prefetch(V + i * ldv + j);
    }

    // Kd = K ⊙ exp(γ_L − γ);  Qe = Q ⊙ exp(γ);  Xk = β K ⊙ exp(γ);  Xv = β V   (all [L, ·])
    for (int64_t i = 0; i < L; ++i) {
      const float eg = std::exp(gam[i]), el = std::exp(gl - gam[i]), b = bt[i];
      for (int64_t x = 0; x < Dk; ++x) {
        const float kv = K[i * ldk + x];
        sc.kd[size_t(i * Dk + x)] = kv * el;
        sc.qe[size_t(i * Dk + x)] = Q[i * ldk + x] * eg;
        sc.xk[size_t(i * Dk + x)] = kv * b * eg;
      }
      for (int64_t j = 0; j < Dv; ++j) sc.xv[size_t(i * Dv + j)] = V[i * ldv + j] * b;
    }
    // decay_ij = exp(γ_i − γ_j) for j ≤ i only (there the exponent is ≤ 0: no overflow, no inf·0);
    // P = (Q Kᵀ) ⊙ decay (zero above the diagonal);  tm first holds β_i (k_i·k_j) decay_ij = A_ij, j < i.
    float* tm = sc.tm.data();
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t j = 0; j <= i; ++j) {
        const float dec = std::exp(gam[i] - gam[j]);
        sc.qk[size_t(i * L + j)] = dot(Q + i * ldk, K + j * ldk, Dk) * dec;
        if (j < i) tm[i * L + j] = bt[i] * dot(K + i * ldk, K + j * ldk, Dk) * dec;
      }
      for (int64_t j = i + 1; j < L; ++j) sc.qk[size_t(i * L + j)] = 0.0f;
    }
    // Tm = (I + A)⁻¹ by forward substitution, Tm_i = e_i − Σ_{j<i} A_ij Tm_j (unit lower triangular).
    for (int64_t i = 0; i < L; ++i) {
      float arow[kChunk];
      std::copy_n(tm + i * L, i, arow);
      float* ti = tm + i * L;
      std::fill(ti, ti + L, 0.0f);
      ti[i] = 1.0f;
      for (int64_t j = 0; j < i; ++j) {
        const float* tj = tm + j * L;
        for (int64_t m = 0; m <= j; ++m) ti[m] -= arow[j] * tj[m];
      }
    }
    // U = Tm Xv;  W = Tm Xk
    gemm(L, Dv, L, 1.0f, tm, L, 1, sc.xv.data(), Dv, sc.u.data(), Dv, false, true);
    gemm(L, Dk, L, 1.0f, tm, L, 1, sc.xk.data(), Dk, sc.w.data(), Dk, false, true);
    // V' = U − W S
    std::copy_n(sc.u.data(), L * Dv, sc.vn.data());
    gemm(L, Dv, Dk, -1.0f, sc.w.data(), Dk, 1, S, Dv, sc.vn.data(), Dv, true);
    // O = Qe S + P V'
    gemm(L, Dv, Dk, 1.0f, sc.qe.data(), Dk, 1, S, Dv, O, ldv, false);
    gemm(L, Dv, L, 1.0f, sc.qk.data(), L, 1, sc.vn.data(), Dv, O, ldv, true, true);
    // S ← exp(γ_L) S + Kdᵀ V'   (Kdᵀ read in place: row stride 1, column stride Dk)
    const float el = std::exp(gl);
    for (int64_t i = 0; i < Dk * Dv; ++i) S[i] *= el;
    gemm(Dk, Dv, L, 1.0f, sc.kd.data(), 1, Dk, sc.vn.data(), Dv, S, Dv, true);
  }
}

}  // namespace

void gdn_gates(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, const Tensor& g,
               const Tensor& beta) {
  // a, b, g, beta: [T, Hv];  A_log, dt_bias: [Hv]
  const int64_t Hv = A_log.numel();
  KAPITSA_CHECK(Hv > 0 && dt_bias.numel() == Hv && a.numel() % Hv == 0 && b.numel() == a.numel() &&
                    g.numel() == a.numel() && beta.numel() == a.numel(),
                "gdn_gates: a {} b {} A_log {} dt_bias {} g {} beta {}", a.shape().str(), b.shape().str(),
                A_log.shape().str(), dt_bias.shape().str(), g.shape().str(), beta.shape().str());
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
  const RecurrentArgs a{check_gdn(q, k, v, g, beta, state, o), q.f32(), k.f32(), v.f32(), g.f32(), beta.f32(),
                        state.f32(), o.f32()};
  if (a.d.T == 0) return;
  // Tasks: (head, block of 32 state columns); the last block of a head also takes the < 32 leftover.
  constexpr int64_t kBlock = 32;
  const int64_t blocks = std::max<int64_t>(1, a.d.Dv / kBlock);
  parallel_for(size_t(a.d.Hv * blocks), 1, [&](size_t begin, size_t end) {
    std::vector<float> scratch(size_t(a.d.Dk * kBlock));
    for (size_t task = begin; task < end; ++task) {
      const int64_t h = int64_t(task) / blocks, blk = int64_t(task) % blocks;
      int64_t j = blk * kBlock;
      const int64_t j_end = blk + 1 == blocks ? a.d.Dv : j + kBlock;
      for (; j + 32 <= j_end; j += 32) recurrent_block<4>(a, h, j, scratch.data());
      for (; j + 8 <= j_end; j += 8) recurrent_block<1>(a, h, j, scratch.data());
      for (; j < j_end; ++j) recurrent_column(a, h, j);
    }
  });
}

void gated_delta_rule_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& beta, const Tensor& state, const Tensor& o) {
  // q, k: [T, Hk, Dk];  v, o: [T, Hv, Dv];  g, beta: [T, Hv];  state: [Hv, Dk, Dv]
  const RecurrentArgs a{check_gdn(q, k, v, g, beta, state, o), q.f32(), k.f32(), v.f32(), g.f32(), beta.f32(),
                        state.f32(), o.f32()};
  if (a.d.T == 0) return;
  parallel_for(size_t(a.d.Hv), 1, [&](size_t begin, size_t end) {
    ChunkScratch sc(kChunk, a.d.Dk, a.d.Dv);
    for (size_t h = begin; h < end; ++h) chunked_head(a, int64_t(h), sc);
  });
}

}  // namespace kapitsa::ops::cpu
