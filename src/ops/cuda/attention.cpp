// CUDA RoPE, causal GQA attention (contiguous and paged, one sequence or a SeqBatch) and the paged KV
// store: checks, host spans (positions, inv_freq, block tables, per-row key counts and destinations)
// copied to the device (a batch's in one transfer), the split-K choice for decode, then the kernels of
// attention.cu. Pages may be f32, bf16 or f16 (the KV cache dtype).
#include "ops/cuda/attention_varlen.h"
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"
#include "ops/step_graph.h"

#include <algorithm>
#include <vector>

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
  // The frequencies are a layer's constants: uploaded once, not per call.
  const float* d_freq = static_cast<const float*>(detail::upload_constant(inv_freq.data(), inv_freq.size_bytes()));
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

// Split-K when (query, head) blocks alone would leave most multiprocessors idle: key ranges of at least
// kMinKeysPerSplit keys, up to about kBlocksPerSm blocks per multiprocessor. Partials go to scratch.
// A block's 4 warps take keys one at a time (tiles of 32, a key a lane, for heads of ≤ 64), so a decode
// step's attention costs the keys (tiles) per warp: with ranges of ≥ 256 keys and 2 blocks an SM, the
// H200 decoded the 4B shape at 259 tok/s after a 512-token prompt against 300–308 after 16; ranges of ≥
// 32 keys and 8 blocks an SM: 309.6 after 512, 292 after 2048 (was 257); Nemotron-3-Nano at full depth
// 254 → 283 after 512, 227 → 269 after 2048 (docs/cuda.md, session 18).
// max_keys: the most keys any query attends to.
void choose_splits(kernels::AttentionArgs& a, int64_t max_keys) {
  constexpr int64_t kMinKeysPerSplit = 32, kBlocksPerSm = 8;
  static const int64_t sm_count = [] {
    int n = 0;
    detail::check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
    return int64_t{n};
  }();
  const int64_t blocks = a.T * a.Hq;
  const int64_t wanted = (kBlocksPerSm * sm_count + blocks - 1) / blocks;
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
  choose_splits(a, a.q_pos0 + a.T);
  kernels::attention(a, stream());
  check_launch("attention");
}

namespace {
// k_pages, v_pages: the same [n_pages, P, Hkv, D] f32|bf16|f16 on the device; returns the page count.
int64_t check_pages(const Tensor& k_pages, const Tensor& v_pages, const char* op) {
  KAPITSA_CHECK(k_pages.rank() == 4 && k_pages.shape() == v_pages.shape() && k_pages.dtype() == v_pages.dtype() &&
                    detail::is_weight_dtype(k_pages.dtype()),
                "{}: k_pages {} {} and v_pages {} {} must be the same [n_pages, P, Hkv, D] f32|bf16|f16", op,
                dtype_name(k_pages.dtype()), k_pages.shape().str(), dtype_name(v_pages.dtype()), v_pages.shape().str());
  detail::check_on_device(k_pages, op, "k_pages"), detail::check_on_device(v_pages, op, "v_pages");
  KAPITSA_CHECK(k_pages.dim(1) > 0, "{}: pages of {} tokens", op, k_pages.dim(1));
  return k_pages.dim(0);
}

// The first `n` positions' pages of block_table exist: a bad id would be an out-of-bounds access on the GPU.
void check_table(std::span<const int32_t> block_table, int64_t n, int64_t P, int64_t n_pages, const char* op) {
  const int64_t used = (n + P - 1) / P;
  KAPITSA_CHECK(n >= 0 && static_cast<int64_t>(block_table.size()) >= used,
                "{}: {} pages of {} tokens do not hold {} positions", op, block_table.size(), P, n);
  for (int64_t i = 0; i < used; ++i)
    KAPITSA_CHECK(block_table[static_cast<size_t>(i)] >= 0 && block_table[static_cast<size_t>(i)] < n_pages,
                  "{}: page id {} outside [0, {})", op, block_table[static_cast<size_t>(i)], n_pages);
}
// The batch's attention arrays on the device, in one transfer (none when they lie in the step's
// metadata mirror). Valid until the next pack.
kernels::VarlenRows device_rows(const SeqBatch& batch) {
  detail::HostPack pack;
  const size_t rows_at = pack.add(batch.row_offsets), pos_at = pack.add(batch.positions0);
  const size_t offsets_at = pack.add(batch.block_offsets), tables_at = pack.add(batch.block_tables);
  pack.upload();
  kernels::VarlenRows r;
  r.row_offsets = pack.at<int64_t>(rows_at);
  r.positions0 = pack.at<int64_t>(pos_at);
  r.block_offsets = pack.at<int32_t>(offsets_at);
  r.block_tables = pack.at<int32_t>(tables_at);
  r.n_seqs = batch.n_seqs();
  return r;
}
}  // namespace

// q: [T, Hq, D];  k_pages, v_pages: [n_pages, P, Hkv, D] f32|bf16|f16;  o: [T, Hq, D].
void attention_paged(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, std::span<const int32_t> block_table,
                     int64_t n_kv, int64_t q_pos0, float scale, const Tensor& o) {
  const int64_t n_pages = check_pages(k_pages, v_pages, "attention_paged"), P = k_pages.dim(1);
  check_table(block_table, n_kv, P, n_pages, "attention_paged");
  kernels::AttentionArgs a =
      check_attention(q, o, k_pages.dim(2), k_pages.dim(3), n_kv, q_pos0, scale, "attention_paged");
  if (a.T == 0) return;
  a.k = k_pages.data(), a.v = v_pages.data();
  a.kv_type = detail::elem_type(k_pages.dtype());
  a.block_table = upload(block_table.first(static_cast<size_t>((n_kv + P - 1) / P)), Slot::span0);
  a.page_tokens = P;
  choose_splits(a, q_pos0 + a.T);
  kernels::attention(a, stream());
  check_launch("attention_paged");
}

// q, o: [T, Hq, D];  pages as attention_paged. The kernel derives each query row's sequence, key count
// and block table from the batch's arrays on the device (attention_varlen.h); the split-K shape comes
// from the key-count bucket (step_graph.h), so it stays fixed while a decode graph is replayed.
void attention_paged_varlen(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, const SeqBatch& batch,
                            float scale, const Tensor& o) {
  const char* op = "attention_paged_varlen";
  const int64_t n_pages = check_pages(k_pages, v_pages, op), P = k_pages.dim(1);
  const int64_t T = q.rank() == 3 ? q.dim(0) : 0;
  KAPITSA_CHECK(!batch.row_offsets.empty() && batch.row_offsets.back() == T, "{}: the batch does not cover the {} rows of q",
                op, T);
  int64_t max_keys = 0;
  for (int64_t i = 0; i < batch.n_seqs(); ++i) {
    const int64_t keys = batch.positions0[size_t(i)] + batch.rows(i);
    check_table(batch.block_table(i), keys, P, n_pages, op);
    max_keys = std::max(max_keys, keys);
  }
  // Key counts are per sequence (checked against its table above); T keys at q_pos0 0 only passes the
  // shared shape checks.
  kernels::AttentionArgs a = check_attention(q, o, k_pages.dim(2), k_pages.dim(3), T, 0, scale, op);
  if (a.T == 0) return;
  a.k = k_pages.data(), a.v = v_pages.data();
  a.kv_type = detail::elem_type(k_pages.dtype());
  a.page_tokens = P;
  const kernels::VarlenRows rows = device_rows(batch);
  choose_splits(a, attention_key_bucket(max_keys));
  kernels::attention_varlen(a, rows, stream());
  check_launch(op);
}

namespace {
// rows: [T, Hkv, D] f32 into pages: [n_pages, P, Hkv, D]; dest: each row's page row (page · P + pos % P).
void store_rows(const Tensor& rows, const Tensor& pages, std::span<const int64_t> dest, const char* op) {
  check_f32(rows, op, "rows");
  detail::check_on_device(pages, op, "pages");
  KAPITSA_CHECK(pages.rank() == 4 && detail::is_weight_dtype(pages.dtype()) && rows.rank() == 3 &&
                    rows.dim(1) == pages.dim(2) && rows.dim(2) == pages.dim(3),
                "{}: rows {} into pages {} {} (f32|bf16|f16)", op, rows.shape().str(), dtype_name(pages.dtype()),
                pages.shape().str());
  const int64_t T = rows.dim(0);
  if (T == 0) return;
  const int64_t* d_dest = upload(dest, Slot::span1);
  kernels::write_paged_rows(rows.f32(), pages.data(), detail::elem_type(pages.dtype()), d_dest, T,
                            rows.dim(1) * rows.dim(2), stream());
  check_launch(op);
}
}  // namespace

// rows: [T, Hkv, D] f32;  pages: [n_pages, P, Hkv, D] f32|bf16|f16;  positions pos0 … pos0 + T - 1.
void write_paged_rows(const Tensor& rows, const Tensor& pages, std::span<const int32_t> block_table, int64_t pos0) {
  const char* op = "write_paged_rows";
  KAPITSA_CHECK(pages.rank() == 4 && pages.dim(1) > 0 && rows.rank() == 3, "{}: rows {}, pages {}", op,
                rows.shape().str(), pages.shape().str());
  const int64_t P = pages.dim(1), T = rows.dim(0);
  KAPITSA_CHECK(pos0 >= 0, "{}: start position {}", op, pos0);
  check_table(block_table, pos0 + T, P, pages.dim(0), op);
  std::vector<int64_t> dest(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = pos0 + t;
    dest[size_t(t)] = int64_t{block_table[size_t(pos / P)]} * P + pos % P;
  }
  store_rows(rows, pages, dest, op);
}

// rows: [T, Hkv, D];  each sequence's rows at positions positions0[i] … through its block table.
void write_paged_rows_varlen(const Tensor& rows, const Tensor& pages, const SeqBatch& batch) {
  const char* op = "write_paged_rows_varlen";
  KAPITSA_CHECK(pages.rank() == 4 && pages.dim(1) > 0 && rows.rank() == 3, "{}: rows {}, pages {}", op,
                rows.shape().str(), pages.shape().str());
  const int64_t P = pages.dim(1), T = rows.dim(0);
  KAPITSA_CHECK(!batch.row_offsets.empty() && batch.row_offsets.back() == T, "{}: the batch does not cover the {} rows",
                op, T);
  for (int64_t i = 0; i < batch.n_seqs(); ++i)
    check_table(batch.block_table(i), batch.positions0[size_t(i)] + batch.rows(i), P, pages.dim(0), op);
  check_f32(rows, op, "rows");
  detail::check_on_device(pages, op, "pages");
  KAPITSA_CHECK(detail::is_weight_dtype(pages.dtype()) && rows.dim(1) == pages.dim(2) && rows.dim(2) == pages.dim(3),
                "{}: rows {} into pages {} {} (f32|bf16|f16)", op, rows.shape().str(), dtype_name(pages.dtype()),
                pages.shape().str());
  if (T == 0) return;
  // Each row's page row is found on the device (attention_varlen.h): nothing per row built here.
  kernels::write_paged_rows_varlen(rows.f32(), pages.data(), detail::elem_type(pages.dtype()), device_rows(batch), P,
                                   T, rows.dim(1) * rows.dim(2), stream());
  check_launch(op);
}


// Shapes checked in ops.cpp; the kernel's head-dim limit and the block tables here.
void attention_prep_varlen(const Tensor& qg, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                           const Tensor& k_norm, float eps, float weight_offset, std::span<const int32_t> positions,
                           std::span<const float> inv_freq, const Tensor& k_pages, const Tensor& v_pages,
                           const SeqBatch& batch, const Tensor& q, const Tensor& gate) {
  const char* op = "attention_prep_varlen";
  for (const Tensor* t : {&qg, &k, &v, &q_norm, &k_norm, &q, &gate}) check_f32(*t, op, "input");
  detail::check_on_device(k_pages, op, "k_pages"), detail::check_on_device(v_pages, op, "v_pages");
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hkv = k.dim(1), P = k_pages.dim(1);
  KAPITSA_CHECK(D <= kernels::kAttentionMaxHeadDim, "{}: head_dim {} above the kernel's {}", op, D,
                kernels::kAttentionMaxHeadDim);
  for (int64_t i = 0; i < batch.n_seqs(); ++i)
    check_table(batch.block_table(i), batch.positions0[size_t(i)] + batch.rows(i), P, k_pages.dim(0), op);
  if (T == 0) return;
  kernels::AttentionPrepArgs a{};
  a.qg = qg.f32(), a.k = k.f32(), a.v = v.f32(), a.q_norm = q_norm.f32(), a.k_norm = k_norm.f32();
  a.eps = eps, a.weight_offset = weight_offset;
  a.positions = upload(positions, Slot::span0);
  // The frequencies are a layer's constants: uploaded once, not per call.
  a.inv_freq = static_cast<const float*>(detail::upload_constant(inv_freq.data(), inv_freq.size_bytes()));
  a.half = static_cast<int>(inv_freq.size());
  a.k_pages = k_pages.data(), a.v_pages = v_pages.data(), a.kv_type = detail::elem_type(k_pages.dtype());
  a.page_tokens = P;
  a.q = q.f32(), a.gate = gate.f32();
  a.T = T, a.Hq = Hq, a.Hkv = Hkv, a.D = D;
  kernels::attention_prep_varlen(a, device_rows(batch), stream());
  check_launch(op);
}

}  // namespace kapitsa::ops::cuda
