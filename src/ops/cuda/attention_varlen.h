// Internal to ops/cuda: the batched (varlen) attention and paged-KV store launchers, which read the
// batch's per-sequence metadata on the device and derive each row's sequence, position, key count and
// page there (a binary search of row_offsets), so nothing per row is built on the host. Their arguments
// then stay fixed from one decode step to the next (device pointers into the step's metadata), which is
// what lets a CUDA graph replay them (graph.h).
#pragma once

#include "ops/cuda/kernels.h"

namespace kapitsa::ops::cuda::kernels {

// A SeqBatch's attention metadata (ops/seq_batch.h), device copies. Row r of the step belongs to the
// sequence i with row_offsets[i] ≤ r < row_offsets[i + 1], sits at position positions0[i] + r −
// row_offsets[i], and sees that many keys plus one, through block_tables + block_offsets[i].
struct VarlenRows {
  const int64_t* row_offsets = nullptr;   // [n_seqs + 1]
  const int64_t* positions0 = nullptr;    // [n_seqs]
  const int32_t* block_offsets = nullptr;  // [n_seqs + 1]
  const int32_t* block_tables = nullptr;
  int64_t n_seqs = 0;
};

#ifdef __CUDACC__
// The sequence holding step row r: the last i with row_offsets[i] ≤ r (empty sequences before it are
// skipped since their end equals the next one's start).
__device__ __forceinline__ int64_t seq_of_row(const VarlenRows& v, int64_t r) {
  int64_t lo = 0, hi = v.n_seqs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (v.row_offsets[mid] <= r) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
#endif

// As attention() with a.row_keys / a.row_table / a.block_table unused: every row's keys and table
// from `rows`. a.T is the step's rows. Prompts (attention_prefill_takes) go to attention_prefill.
void attention_varlen(const AttentionArgs& a, const VarlenRows& rows, cudaStream_t s);
// The tiled prompt kernel (attention_prefill.cu): at least 64 rows, one key range (splits 1), head dim
// 64, 128 or 256, q 16-byte aligned.
bool attention_prefill_takes(const AttentionArgs& a);
void attention_prefill(const AttentionArgs& a, const VarlenRows& rows, cudaStream_t s);
// rows: [T, row] f32 into pages ([n_pages · page_tokens, row] of `type`) at each row's position.
void write_paged_rows_varlen(const float* rows, void* pages, ElemType type, const VarlenRows& seqs,
                             int64_t page_tokens, int64_t T, int64_t row, cudaStream_t s);

// attention_prep_varlen (op_list.inc): one block per (row, head) over Hq query heads, Hkv key heads and
// Hkv value heads; D ≤ kAttentionMaxHeadDim.
struct AttentionPrepArgs {
  const float* qg;               // [T, Hq, 2·D]
  const float *k, *v;            // [T, Hkv, D]
  const float *q_norm, *k_norm;  // [D]
  float eps, weight_offset;
  const int32_t* positions;  // [T]
  const float* inv_freq;     // [half]
  int half;
  void *k_pages, *v_pages;  // [n_pages · page_tokens, Hkv · D] of kv_type
  ElemType kv_type;
  int64_t page_tokens;
  float *q, *gate;  // [T, Hq, D]
  int64_t T, Hq, Hkv, D;
};
void attention_prep_varlen(const AttentionPrepArgs& a, const VarlenRows& rows, cudaStream_t s);

}  // namespace kapitsa::ops::cuda::kernels
