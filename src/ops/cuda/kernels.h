// Internal to ops/cuda: the kernel launchers, one group per .cu file. They take raw device pointers and
// sizes only (no Tensor, so the .cu files need none of the host headers) and queue work on `s`.
// Arguments are checked by the .cpp callers; launchers only launch. Shapes as in op_list.inc.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace kapitsa::ops::cuda::kernels {

enum class ElemType : int { f32, f16, bf16 };

// elementwise.cu — n elements; in place allowed.
void add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s);
void silu_mul(const float* gate, const float* up, float* y, int64_t n, cudaStream_t s);
// x, y: [R, C];  gate: [R, C], or [R] when broadcast.
void mul_sigmoid(const float* x, const float* gate, float* y, int64_t R, int64_t C, bool broadcast, cudaStream_t s);
void relu_squared(const float* x, float* y, int64_t n, cudaStream_t s);

// layout.cu
// table: [V, H] of `type`;  ids: [T] (checked in range by the caller);  out: [T, H].
void embedding(const void* table, ElemType type, const int32_t* ids, float* out, int64_t T, int64_t H, cudaStream_t s);
// dst[i] = src[i] converted (round to nearest even when narrowing), i < n; src and dst do not overlap.
void convert(const void* src, ElemType src_type, void* dst, ElemType dst_type, int64_t n, cudaStream_t s);

// matmul.cu — y: [T, N] = x: [T, K] · wᵀ, w: [N, K] of `type`, f32 accumulation; for small T (decode).
void gemv(const float* x, const void* w, ElemType type, float* y, int64_t T, int64_t K, int64_t N, cudaStream_t s);
constexpr int64_t kGemvMaxTokens = 8;

// norm.cu — x, z, y: [R, D];  w: [D]. In place allowed.
void rms_norm(const float* x, const float* w, float eps, float weight_offset, float* y, int64_t R, int64_t D,
              cudaStream_t s);
void rms_norm_gated(const float* x, const float* z, const float* w, float eps, float* y, int64_t R, int64_t D,
                    cudaStream_t s);
void l2_norm(const float* x, float eps, float scale, float* y, int64_t R, int64_t D, cudaStream_t s);
// norm_group.cu — groups of group_size columns.
void rms_norm_group_gated(const float* x, const float* z, const float* w, int64_t group_size, float eps, float* y,
                          int64_t R, int64_t D, cudaStream_t s);

// attention.cu
// x: [T, H, D] in place;  positions: [T];  inv_freq: [half].
void rope_neox(float* x, const int32_t* positions, const float* inv_freq, int64_t T, int64_t H, int64_t D, int half,
               cudaStream_t s);
// Causal GQA attention. Key/value row of key s: s itself (block_table == nullptr: k, v: [S, Hkv, D]) or
// block_table[s / page_tokens] · page_tokens + s % page_tokens (k, v: [n_pages, P, Hkv, D]).
struct AttentionArgs {
  const float* q;  // [T, Hq, D]
  const float* k;
  const float* v;
  float* o;  // [T, Hq, D]
  int64_t T, Hq, Hkv, D, q_pos0;
  float scale;
  const int32_t* block_table;
  int64_t page_tokens;
  // Split-K (decode): splits > 1 divides each query's keys into ranges of keys_per_split, one block
  // each, whose partial results go to `partials` ([T, Hq, splits, D + 2] floats) and are then combined.
  int64_t splits = 1, keys_per_split = 0;
  float* partials = nullptr;
};
constexpr int64_t kAttentionMaxHeadDim = 256;
void attention(const AttentionArgs& a, cudaStream_t s);

// conv1d.cu — x, y: [T, C];  w: [C, K];  bias: [C] or nullptr;  window: [K-1, C] in/out.
constexpr int64_t kConvMaxWidth = 8;
void conv1d_causal(const float* x, const float* w, const float* bias, float* window, bool silu, float* y, int64_t T,
                   int64_t C, int64_t K, cudaStream_t s);

// gated_delta_rule.cu
// a, b, g, beta: [n / Hv, Hv];  A_log, dt_bias: [Hv].
void gdn_gates(const float* a, const float* b, const float* A_log, const float* dt_bias, float* g, float* beta,
               int64_t n, int64_t Hv, cudaStream_t s);
struct GdnArgs {
  const float *q, *k;     // [T, Hk, Dk]
  const float* v;         // [T, Hv, Dv]
  const float *g, *beta;  // [T, Hv]
  float* state;           // [Hv, Dk, Dv] in/out
  float* o;               // [T, Hv, Dv]
  int64_t T, Hk, Hv, Dk, Dv;
};
constexpr int64_t kGdnMaxKeyDim = 256;
void gated_delta_rule(const GdnArgs& a, cudaStream_t s);

// ssm.cu — Mamba-2 recurrence.
struct SsdArgs {
  const float* x;                     // [T, H, P]
  const float* dt;                    // [T, H]
  const float *B, *C;                 // [T, G, N]
  const float *A_log, *D, *dt_bias;   // [H]
  float dt_min, dt_max;
  float* state;                       // [H, P, N] in/out
  float* y;                           // [T, H, P]
  int64_t T, H, P, G, N;
};
constexpr int64_t kSsdMaxStateDim = 256;
void ssd_scan(const SsdArgs& a, cudaStream_t s);

// moe.cu — logits: [T, E];  ids: [T, k];  weights: [T, k].
void moe_route_softmax(const float* logits, int64_t T, int64_t E, int k, bool renormalize, int32_t* ids,
                       float* weights, cudaStream_t s);
// out: [R, H] = x[rows[r], :].
void gather_rows(const float* x, const int32_t* rows, float* out, int64_t R, int64_t H, cudaStream_t s);
// dst[rows[r], :] += weights[r] · src[r, :], r in order (deterministic).
void scale_add_rows(const float* src, const int32_t* rows, const float* weights, float* dst, int64_t R, int64_t H,
                    cudaStream_t s);
// moe_sigmoid.cu — bias: [E] or nullptr.
constexpr int kMoeMaxGroups = 64;
void moe_route_sigmoid(const float* logits, const float* bias, int64_t T, int64_t E, int k, int n_group,
                       int topk_group, bool renormalize, float scaling, int32_t* ids, float* weights, cudaStream_t s);

}  // namespace kapitsa::ops::cuda::kernels
