// CUDA RoPE and causal GQA attention (contiguous and paged): checks, host spans (positions, inv_freq,
// the block table) copied to the device, the split-K choice for decode, then the kernels of attention.cu.
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"

#include <algorithm>

namespace kapitsa::ops::cuda {
using detail::check_f32;
using detail::check_launch;
using detail::Slot;
using detail::stream;
using detail::upload;

// x: [T, n_heads, D];  positions: [T];  inv_freq: [rotary_dim / 2].
void rope_neox(const Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq) {
  check_f32(x, "rope_neox", "x");
  KAPITSA_CHECK(x.rank() == 3, "rope_neox: x must be [T, n_heads, D], got {}", x.shape().str());
  const int64_t T = x.dim(0), H = x.dim(1), D = x.dim(2);
  const int half = static_cast<int>(inv_freq.size());
  KAPITSA_CHECK(static_cast<int64_t>(positions.size()) == T, "rope_neox: {} positions for {} tokens", positions.size(),
                T);
  KAPITSA_CHECK(half > 0 && 2 * half <= D, "rope_neox: rotary_dim {} must be within head_dim {}", 2 * half, D);
  if (T == 0) return;
  const int32_t* d_pos = upload(positions, Slot::span0);
  const float* d_freq = upload(inv_freq, Slot::span1);
  kernels::rope_neox(x.f32(), d_pos, d_freq, T, H, D, half, stream());
  check_launch("rope_neox");
}

namespace {
// Shapes shared by both attention ops; returns the kernel arguments without k, v and the block table.
kernels::AttentionArgs check_attention(const Tensor& q, const Tensor& o, int64_t Hkv, int64_t D, int64_t n_keys,
                                       int64_t q_pos0, float scale, const char* op) {
  check_f32(q, op, "q"), check_f32(o, op, "o");
  KAPITSA_CHECK(q.rank() == 3 && o.shape() == q.shape(), "{}: q {} and o {} must be the same [T, Hq, D]", op,
                q.shape().str(), o.shape().str());
  const int64_t T = q.dim(0), Hq = q.dim(1);
  KAPITSA_CHECK(q.dim(2) == D, "{}: kv head_dim {} vs q {}", op, D, q.dim(2));
  KAPITSA_CHECK(D <= kernels::kAttentionMaxHeadDim, "{}: head_dim {} above the kernel's {}", op, D,
                kernels::kAttentionMaxHeadDim);
  KAPITSA_CHECK(Hkv > 0 && Hq % Hkv == 0, "{}: {} query heads not a multiple of {} kv heads", op, Hq, Hkv);
  KAPITSA_CHECK(q_pos0 >= 0 && n_keys >= q_pos0 + T, "{}: {} keys for queries at {}..{}", op, n_keys, q_pos0, q_pos0 + T);
  KAPITSA_CHECK(o.data() != q.data() || T == 0, "{}: o must not alias q", op);
  return kernels::AttentionArgs{q.f32(), nullptr, nullptr, o.f32(), T, Hq, Hkv, D, q_pos0, scale, nullptr, 0};
}

// Split-K when (query, head) blocks alone would leave most multiprocessors idle: enough key ranges of
// at least kMinKeysPerSplit keys for about two blocks per multiprocessor. Partials go to scratch.
void choose_splits(kernels::AttentionArgs& a) {
  constexpr int64_t kMinKeysPerSplit = 256;
  static const int64_t sm_count = [] {
    int n = 0;
    detail::check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
    return int64_t{n};
  }();
  const int64_t blocks = a.T * a.Hq, max_keys = a.q_pos0 + a.T;
  const int64_t wanted = (2 * sm_count + blocks - 1) / blocks;
  const int64_t splits = std::min(wanted, (max_keys + kMinKeysPerSplit - 1) / kMinKeysPerSplit);
  if (splits <= 1) return;
  a.keys_per_split = (max_keys + splits - 1) / splits;
  a.splits = (max_keys + a.keys_per_split - 1) / a.keys_per_split;
  a.partials = static_cast<float*>(
      detail::scratch(detail::Slot::temp0, static_cast<size_t>(blocks * a.splits * (a.D + 2)) * sizeof(float)));
}
}  // namespace

// q: [T, Hq, D];  k, v: [S, Hkv, D];  o: [T, Hq, D].
void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos0, float scale, const Tensor& o) {
  check_f32(k, "attention", "k"), check_f32(v, "attention", "v");
  KAPITSA_CHECK(k.rank() == 3 && k.shape() == v.shape(), "attention: k {} and v {} must be the same [S, Hkv, D]",
                k.shape().str(), v.shape().str());
  kernels::AttentionArgs a = check_attention(q, o, k.dim(1), k.dim(2), k.dim(0), q_pos0, scale, "attention");
  a.k = k.f32(), a.v = v.f32();
  choose_splits(a);
  kernels::attention(a, stream());
  check_launch("attention");
}

// q: [T, Hq, D];  k_pages, v_pages: [n_pages, P, Hkv, D];  o: [T, Hq, D].
void attention_paged(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, std::span<const int32_t> block_table,
                     int64_t n_kv, int64_t q_pos0, float scale, const Tensor& o) {
  check_f32(k_pages, "attention_paged", "k_pages"), check_f32(v_pages, "attention_paged", "v_pages");
  KAPITSA_CHECK(k_pages.rank() == 4 && k_pages.shape() == v_pages.shape(),
                "attention_paged: k_pages {} and v_pages {} must be the same [n_pages, P, Hkv, D]",
                k_pages.shape().str(), v_pages.shape().str());
  const int64_t n_pages = k_pages.dim(0), P = k_pages.dim(1);
  KAPITSA_CHECK(P > 0 && n_kv >= 0 && static_cast<int64_t>(block_table.size()) * P >= n_kv,
                "attention_paged: {} pages of {} tokens do not hold {} keys", block_table.size(), P, n_kv);
  const int64_t used_pages = (n_kv + P - 1) / P;
  for (int64_t i = 0; i < used_pages; ++i)  // checked here: a bad id would be an out-of-bounds read on the GPU
    KAPITSA_CHECK(block_table[static_cast<size_t>(i)] >= 0 && block_table[static_cast<size_t>(i)] < n_pages,
                  "attention_paged: page id {} outside [0, {})", block_table[static_cast<size_t>(i)], n_pages);
  kernels::AttentionArgs a =
      check_attention(q, o, k_pages.dim(2), k_pages.dim(3), n_kv, q_pos0, scale, "attention_paged");
  if (a.T == 0) return;
  a.k = k_pages.f32(), a.v = v_pages.f32();
  a.block_table = upload(block_table.first(static_cast<size_t>(used_pages)), Slot::span0);
  a.page_tokens = P;
  choose_splits(a);
  kernels::attention(a, stream());
  check_launch("attention_paged");
}

}  // namespace kapitsa::ops::cuda
