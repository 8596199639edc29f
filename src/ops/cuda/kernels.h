// Internal to ops/cuda: the kernel launchers, one group per .cu file. They take raw device pointers and
// sizes only (no Tensor, so the .cu files need none of the host headers) and queue work on `s`.
// Arguments are checked by the .cpp callers; launchers only launch. Shapes as in op_list.inc.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace kapitsa::ops::cuda::kernels {

enum class ElemType : int { f32, f16, bf16 };
// What a GEMV does to each output before storing it: nothing, or relu(v)² (matmul_relu_squared,
// matmul_experts_relu_squared: the activation without a pass of its own).
enum class Epilogue : int { none, relu_squared };

// Whether decode-path kernels are queued with programmatic dependent launch (kernel_util.cuh, launch()):
// on unless KAPITSA_CUDA_PDL=0 (read once; runtime.cpp).
bool pdl_enabled();

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
// Column blocks of rows-major 2-D arrays, up to kMaxColumnCopies in one launch: for each i and row r < R,
// the width[i] bytes at src[i] + r·src_pitch[i] go to dst[i] + r·dst_pitch[i] (split_columns,
// concat_columns; one kernel instead of a 2-D memcpy node per block in a decode step's graph).
constexpr int kMaxColumnCopies = 8;
struct ColumnCopies {
  const uint8_t* src[kMaxColumnCopies];
  uint8_t* dst[kMaxColumnCopies];
  int64_t src_pitch[kMaxColumnCopies], dst_pitch[kMaxColumnCopies], width[kMaxColumnCopies];
  int n = 0;
};
void copy_columns(const ColumnCopies& c, int64_t R, cudaStream_t s);

// matmul.cu — y: [T, N] = x: [T, K] · wᵀ, w: [N, K] of `type`, f32 accumulation; for small T (decode).
// Each token's row is summed in the one-token order whatever T (batch-invariant), unless
// KAPITSA_GEMV_ROWS=0 (then dense_gemv_rows_enabled() is false and matmul sends 2+ tokens to cuBLAS).
bool dense_gemv_rows_enabled();
void gemv(const float* x, const void* w, ElemType type, float* y, int64_t T, int64_t K, int64_t N, cudaStream_t s,
          Epilogue act = Epilogue::none);
constexpr int64_t kGemvMaxTokens = 8;
// Several weights of one type applied to the same x in one launch (matmul_many): part i computes
// y_i: [T, N_i] = x · w_iᵀ, w_i: [N_i, K]. Any number of parts (launched kGemvMaxParts at a time).
struct GemvPart {
  const void* w;
  float* y;
  int64_t N;
};
constexpr int kGemvMaxParts = 4;
void gemv_many(const float* x, const GemvPart* parts, int n_parts, ElemType type, int64_t T, int64_t K, cudaStream_t s,
               Epilogue act = Epilogue::none);
// y: [N] = silu(x · w_gateᵀ) ⊙ (x · w_upᵀ) for one token (x: [K]; w_gate, w_up: [N, K] of `type`; K a
// multiple of 16 bytes of weights, every pointer 16-byte aligned), each dot product accumulated in
// gemv's order.
void gemv_swiglu(const float* x, const void* w_gate, const void* w_up, ElemType type, float* y, int64_t K, int64_t N,
                 cudaStream_t s);
// x: [n] f32 → parts: [n_parts, n] bf16, each the bf16 rounding of what the earlier ones leave of x: three
// carry x exactly (so three bf16 products on the tensor cores keep f32's precision), two to 16 bits.
void split_bf16(const float* x, void* parts, int64_t n, int n_parts, cudaStream_t s);

// How the dequantize kernels write a value v of their [R, K] output: f32 (ref's value, bit for bit), or
// bf16_pair: out [2, R, K] bf16, hi = bf16(v) then lo = bf16(v − hi), so hi + lo carries v to 16
// significant bits (prefill's tensor-core GEMMs, matmul.cpp).
enum class DequantOut : int { f32, bf16_pair };

// dequantize.cu — MLX affine rows: out[r, :] = row rows[r] (r itself when rows is null) of the weight,
// w[k] = fma(scale[g], q_k, bias[g]) with g = k / group_size (one rounding, as ref), written as `mode`.
// words: [N, words_per_row] u32, each row one little-endian bit stream of K codes of `bits` bits;
// scales, biases: [N, K / group_size] of sb_type;  out: [R, K] (bf16_pair: [2, R, K]).
struct AffineArgs {
  const uint32_t* words;
  const void *scales, *biases;
  ElemType sb_type;
  int bits, group_size;
  int64_t K, words_per_row;
};
// The same weight without its first r0 rows.
inline AffineArgs affine_rows_from(AffineArgs a, int64_t r0) {
  const int64_t sb_bytes = a.sb_type == ElemType::f32 ? 4 : 2, groups = a.K / a.group_size;
  a.words += r0 * a.words_per_row;
  a.scales = static_cast<const char*>(a.scales) + r0 * groups * sb_bytes;
  a.biases = static_cast<const char*>(a.biases) + r0 * groups * sb_bytes;
  return a;
}
void dequantize_affine(const AffineArgs& a, const int32_t* rows, void* out, DequantOut mode, int64_t R, cudaStream_t s);
// affine_gemv.cu — y: [T, N] = x: [T, K] · dequant(w)ᵀ for T ≤ kGemvMaxTokens, w MLX affine [N, K],
// dequantize-and-dot fused (decode). Supported: bits 2/3/4/5/6/8, group sizes multiples of 32, codes
// packed without row padding, x (and 4/8-bit codes) 16-byte aligned; otherwise dequantize_affine and a
// dense matmul.
bool affine_gemv_supported(const AffineArgs& a, const float* x, int64_t T);
void affine_gemv(const float* x, const AffineArgs& a, float* y, int64_t T, int64_t N, cudaStream_t s);
// The int16-activation path of affine_gemv.cu (4 bits, groups of a multiple of 64, T ≤ kGemvMaxTokens,
// 16-byte aligned codes; off with KAPITSA_CUDA_AFFINE_INT16=0): quantize_x_int16 rounds x: [T, K] into
// `scratch` (affine_int16_scratch_bytes), which then serves every GEMV on that x:
// affine_gemv_int16: y[i]: [T, N[i]] = x · dequant(a[i])ᵀ for n weights (kInt16MaxParts to a launch;
// every a[i] of the same K, group size and scale type); affine_gemv_int16_swiglu: y: [T, N] =
// silu(x · gateᵀ) ⊙ (x · upᵀ) in one launch.
bool affine_int16_supported(const AffineArgs& a, int64_t T);
size_t affine_int16_scratch_bytes(int64_t T, int64_t K);
void quantize_x_int16(const float* x, int64_t T, int64_t K, void* scratch, cudaStream_t s);
constexpr int kInt16MaxParts = 4;
struct Int16Parts {
  AffineArgs a[kInt16MaxParts];
  float* y[kInt16MaxParts];
  int64_t N[kInt16MaxParts];
  int64_t first_block[kInt16MaxParts];
  int n;
  Epilogue act;  // parts and experts launches (not SwiGLU's)
};
void affine_gemv_int16(const void* scratch, const AffineArgs* a, float* const* y, const int64_t* N, int n, int64_t T,
                       cudaStream_t s, Epilogue act = Epilogue::none);
void affine_gemv_int16_swiglu(const void* scratch, const AffineArgs& gate, const AffineArgs& up, float* y, int64_t N,
                              int64_t T, cudaStream_t s);

// Routed experts over MLX affine weights (matmul_experts): y[p, :] = x[p / k, :] · dequant(expert ids[p])ᵀ
// for p < T·k; x: [T, K];  y: [T·k, N];  `a` gives the experts' common shape (bits, group size, K, scale
// type; its pointers are not used), `table` each expert's codes, scales and biases (on the device). An id
// outside [0, E) writes NaN. 4 bits with groups of a multiple of 64 and 16-byte aligned x and codes
// (affine_experts_int16): x rounded to int16 once in `scratch` (affine_int16_scratch_bytes(T, K)), the
// int16 GEMV per (token, choice); other bits the chunk kernel (then `act` as a pass of its own). Supported:
// affine_experts_supported.
struct AffineExpert {
  const uint32_t* words;
  const void *scales, *biases;
};
struct ExpertRoute {
  const AffineExpert* table;
  const int32_t* ids;
  int64_t E, k;
};
bool affine_experts_supported(const AffineArgs& a);
bool affine_experts_int16(const AffineArgs& a, bool aligned);
void affine_experts(const float* x, const void* scratch, const AffineArgs& a, const ExpertRoute& route, float* y,
                    int64_t T, int64_t N, bool aligned, cudaStream_t s, Epilogue act = Epilogue::none);

// ggml.cu — llama.cpp block weights (WeightFormat::ggml): row n of the weight is K / block_size blocks
// of `type` (ggml's type number, tensor/ggml_type.h) back to back at blocks + n·row_bytes; K a multiple
// of 32. ggml_supported: the types the device decodes (every type ref decodes).
struct GgmlArgs {
  const uint8_t* blocks;
  uint32_t type;
  int64_t K, row_bytes;
};
bool ggml_supported(uint32_t type);
// out: [R, K] (bf16_pair: [2, R, K]) = rows rows[r] (r itself when rows is null) dequantized (f32: bit-equal
// to ref's), written as `mode`.
void dequantize_ggml(const GgmlArgs& a, const int32_t* rows, void* out, DequantOut mode, int64_t R, cudaStream_t s);
// y: [T, N] = x: [T, K] · dequant(w)ᵀ, T ≤ kGemvMaxTokens, x 16-byte aligned; each token's row the
// same bits whatever T.
void ggml_gemv(const float* x, const GgmlArgs& a, float* y, int64_t T, int64_t N, cudaStream_t s);
// Routed experts: y[p, :] = x[p / k, :] · dequant(expert ids[p])ᵀ for p < T·k, table[e] expert e's blocks
// (on the device; every expert of a's shape and row_bytes; `addresses` the OR of their host-known base
// addresses, for the alignment the kernel may use); an id outside [0, E) writes NaN.
struct GgmlRoute {
  const uint8_t* const* table;
  const int32_t* ids;
  int64_t E, k;
};
void ggml_experts(const float* x, const GgmlArgs& a, const GgmlRoute& route, uintptr_t addresses, float* y, int64_t T,
                  int64_t N, cudaStream_t s);
// ggml_int8.cu — the int8-activation path for Q8_0, Q4_0, IQ4_NL, Q4_K, Q5_K, Q6_K and IQ4_XS
// (ggml_int8_block: the inputs per x scale, 32 or 256; 0 for other types), T ≤ kGemvMaxTokens: quantize_x_int8 rounds x: [T, K] into
// `scratch` (ggml_int8_scratch_bytes) as the cpu backend does, then ggml_gemv_int8 / ggml_experts_int8
// (every expert of one type) read it. An output moves by at most Σ|w_k|·dx_k/2 from the f32 result.
// Off with KAPITSA_CUDA_GGML_INT8=0 (ggml_int8_enabled).
int ggml_int8_block(uint32_t type);
bool ggml_int8_enabled();
size_t ggml_int8_scratch_bytes(int64_t T, int64_t K, int64_t B);
void quantize_x_int8(const float* x, int64_t T, int64_t K, int64_t B, void* scratch, cudaStream_t s);
void ggml_gemv_int8(const void* scratch, const GgmlArgs& a, float* y, int64_t T, int64_t N, cudaStream_t s);
void ggml_experts_int8(const void* scratch, const GgmlArgs& a, const GgmlRoute& route, float* y, int64_t T, int64_t N,
                       cudaStream_t s);

// norm.cu — x, z, y: [R, D];  w: [D]. In place allowed.
void rms_norm(const float* x, const float* w, float eps, float weight_offset, float* y, int64_t R, int64_t D,
              cudaStream_t s);
void rms_norm_gated(const float* x, const float* z, const float* w, float eps, float* y, int64_t R, int64_t D,
                    cudaStream_t s);
void l2_norm(const float* x, float eps, float scale, float* y, int64_t R, int64_t D, cudaStream_t s);
// x ← x + delta, then y = rms_norm(x); x, delta, y distinct.
void add_rms_norm(float* x, const float* delta, const float* w, float eps, float weight_offset, float* y, int64_t R,
                  int64_t D, cudaStream_t s);
// norm_group.cu — groups of group_size columns.
void rms_norm_group_gated(const float* x, const float* z, const float* w, int64_t group_size, float eps, float* y,
                          int64_t R, int64_t D, cudaStream_t s);

// attention.cu
// x: [T, H, D] in place;  positions: [T];  inv_freq: [half].
void rope_neox(float* x, const int32_t* positions, const float* inv_freq, int64_t T, int64_t H, int64_t D, int half,
               cudaStream_t s);
// Causal GQA attention. Key/value row of key s: s itself (block_table == nullptr: k, v: [S, Hkv, D]) or
// block_table[s / page_tokens] · page_tokens + s % page_tokens (k, v: [n_pages, P, Hkv, D]).
// Query t attends to keys 0 … q_pos0 + t, or, with row_keys (a batch of sequences, varlen), to keys
// 0 … row_keys[t] - 1 through the block table starting at block_table + row_table[t].
struct AttentionArgs {
  const float* q;  // [T, Hq, D]
  const void* k;   // of kv_type
  const void* v;
  float* o;  // [T, Hq, D]
  int64_t T, Hq, Hkv, D, q_pos0;
  float scale;
  const int32_t* block_table;
  int64_t page_tokens;
  ElemType kv_type = ElemType::f32;
  const int64_t* row_keys = nullptr;   // [T] or nullptr
  const int32_t* row_table = nullptr;  // [T] offsets into block_table, with row_keys
  // Split-K (decode): splits > 1 divides each query's keys into ranges of keys_per_split, one block
  // each, whose partial results go to `partials` ([T, Hq, splits, D + 2] floats) and are then combined.
  int64_t splits = 1, keys_per_split = 0;
  float* partials = nullptr;
};
constexpr int64_t kAttentionMaxHeadDim = 256;
void attention(const AttentionArgs& a, cudaStream_t s);
// Paged KV store: pages row dest_rows[t] (= page · P + position % P) := rows[t, :] converted to `type`
// (round to nearest even).  rows: [T, row] f32;  pages: [n_pages · P, row] of `type`.
void write_paged_rows(const float* rows, void* pages, ElemType type, const int64_t* dest_rows, int64_t T, int64_t row,
                      cudaStream_t s);

// A batch of sequences for the recurrent kernels (ops/seq_batch.h), device copies of its spans. Sequence
// i has rows [row_offsets[i], row_offsets[i+1]) and its state in slot state_slots[i]; the state after each
// of its last ckpt_offsets[i+1] - ckpt_offsets[i] tokens also goes to slot ckpt_slots[ckpt_offsets[i] + j].
// One sequence of all T rows in slot 0 without checkpoints: every pointer null (the single-sequence ops).
struct Seqs {
  int64_t n_seqs = 1;
  const int64_t* row_offsets = nullptr;   // [n_seqs + 1], or null: [0, T]
  const int32_t* state_slots = nullptr;   // [n_seqs], or null: slot 0
  const int32_t* ckpt_offsets = nullptr;  // [n_seqs + 1], or null: no checkpoints
  const int32_t* ckpt_slots = nullptr;
};

// conv1d.cu — x, y: [T, C];  w: [C, K];  bias: [C] or nullptr;  windows: [n_slots, K-1, C] in/out.
constexpr int64_t kConvMaxWidth = 8;
// longest: the most rows of one sequence (T for one sequence).
void conv1d_causal(const float* x, const float* w, const float* bias, float* windows, bool silu, float* y, int64_t T,
                   int64_t C, int64_t K, const Seqs& seqs, int64_t longest, cudaStream_t s);

// gated_delta_rule.cu
// a, b, g, beta: [n / Hv, Hv];  A_log, dt_bias: [Hv].
void gdn_gates(const float* a, const float* b, const float* A_log, const float* dt_bias, float* g, float* beta,
               int64_t n, int64_t Hv, cudaStream_t s);
struct GdnArgs {
  const float *q, *k;     // [T, Hk, Dk]
  const float* v;         // [T, Hv, Dv]
  const float *g, *beta;  // [T, Hv]
  float* state;           // [n_slots, Hv, Dk, Dv] in/out
  float* o;               // [T, Hv, Dv]
  int64_t T, Hk, Hv, Dk, Dv;
  Seqs seqs;
};
constexpr int64_t kGdnMaxKeyDim = 256;
void gated_delta_rule(const GdnArgs& a, cudaStream_t s);
// The chunked (WY / SSD) forms of the state scans, for prefill: sequence i's rows cut into chunks
// [seq_first[i], seq_first[i+1]) of up to kStateChunk rows (chunk c: rows start[c] … start[c] + len[c]).
constexpr int64_t kStateChunk = 64;
constexpr int64_t kStateChunkMaxDim = 128;  // the state's rows (Dk, N); Gated DeltaNet's Dv too (its prep)
struct ChunkList {
  int64_t n;
  const int64_t* start;
  const int32_t* len;
  const int32_t* seq_first;  // [n_seqs + 1]
};
// chunk_scan.cu — the walk over the chunks both share, after a prep kernel computed every chunk's
// products (γ the running sum of the log-decay, P the masked intra-chunk products): per chunk,
//   V' = U − W S (no W: V' = U);  O = e^γ ⊙ (Q S) + P V' + skip ⊙ U;  S ← e^(γ_L) S + (e^(γ_L−γ) ⊙ K)ᵀ V'
// with S [Dk, Dv] per (slot, value head) ([Dv, Dk] in memory when state_vk) and K's rows scaled per value
// head by k_scale when given. Dk ≤ kStateChunkMaxDim, Dk % 4 == 0; no checkpoints.
struct ChunkScanArgs {
  const float *q, *k;       // [T, Hk, Dk]
  const float* k_scale;     // [T, Hv] or nullptr
  const float *U, *W;       // [T, Hv, Dv]; [T, Hv, Dk] or nullptr
  const float *gamma, *P;   // [T, Hv]; [n, Hv, kStateChunk, kStateChunk], zero above the diagonal and past len
  const float* skip;        // [Hv] or nullptr
  float* state;             // [n_slots, Hv, Dk, Dv] in/out ([n_slots, Hv, Dv, Dk] when state_vk)
  bool state_vk;
  float* o;                 // [T, Hv, Dv]
  int64_t T, Hk, Hv, Dk, Dv;
  Seqs seqs;
  ChunkList chunks;
};
void chunk_scan(const ChunkScanArgs& a, cudaStream_t s);
// gated_delta_rule_chunked.cu — gated_delta_rule in the WY form: Dk, Dv ≤ kStateChunkMaxDim, Dk % 4 == 0,
// no checkpoints; scratch: gdn_chunk_scratch_floats floats.
size_t gdn_chunk_scratch_floats(int64_t T, int64_t n_chunks, int64_t Hv, int64_t Dk, int64_t Dv);
void gated_delta_rule_chunked(const GdnArgs& a, const ChunkList& c, float* scratch, cudaStream_t s);
// gdn_core_varlen (op_list.inc): one block per (value head, sequence), so the head's output norm is
// block-local. Dk ≤ kGdnMaxKeyDim, Dv ≤ kGdnCoreMaxValueDim (checked by the caller).
struct GdnCoreArgs {
  const float* qkv;                // [T, 2·Hk·Dk + Hv·Dv]
  const float *a, *b;              // [T, Hv]
  const float *A_log, *dt_bias;    // [Hv]
  const float* z;                  // [T, Hv, Dv]
  const float* norm_w;             // [Dv]
  float norm_eps;
  float* state;                    // [n_slots, Hv, Dk, Dv] in/out
  float* o;                        // [T, Hv, Dv]
  int64_t T, Hk, Hv, Dk, Dv;
  Seqs seqs;
};
constexpr int64_t kGdnCoreMaxValueDim = 256;
void gdn_core(const GdnCoreArgs& a, cudaStream_t s);

// ssm.cu — Mamba-2 recurrence.
struct SsdArgs {
  const float* x;                     // [T, H, P], token rows x_stride apart
  const float* dt;                    // [T, H]
  const float *B, *C;                 // [T, G, N], token rows bc_stride apart
  const float *A_log, *D, *dt_bias;   // [H]
  float dt_min, dt_max;
  float* state;                       // [n_slots, H, P, N] in/out
  float* y;                           // [T, H, P]
  int64_t T, H, P, G, N;
  Seqs seqs;
  // Elements between tokens' rows: H·P and G·N when x, B and C are arrays of their own, the conv output's
  // width when they are its columns (ssd_scan_varlen). The chunked kernels take only the former.
  int64_t x_stride, bc_stride;
};
constexpr int64_t kSsdMaxStateDim = 256;
void ssd_scan(const SsdArgs& a, cudaStream_t s);
// ssm_chunked.cu — ssd_scan in the chunked (SSD) form: N ≤ kStateChunkMaxDim, N % 4 == 0, no checkpoints;
// scratch: ssd_chunk_scratch_floats floats.
size_t ssd_chunk_scratch_floats(int64_t T, int64_t n_chunks, int64_t H);
void ssd_scan_chunked(const SsdArgs& a, const ChunkList& c, float* scratch, cudaStream_t s);

// moe.cu — logits: [T, E];  ids: [T, k];  weights: [T, k].
void moe_route_softmax(const float* logits, int64_t T, int64_t E, int k, bool renormalize, int32_t* ids,
                       float* weights, cudaStream_t s);
// out[r] = the first index of the largest of x[r, 0 … columns) (a NaN never wins, one at 0 gives 0).
// x: [R, V] (row stride V).
void argmax_rows(const float* x, int64_t V, int64_t columns, int32_t* out, int64_t R, cudaStream_t s);
// out: [R, H] = x[rows[r], :].
void gather_rows(const float* x, const int32_t* rows, float* out, int64_t R, int64_t H, cudaStream_t s);
// dst[rows[r], :] += weights[r] · src[r, :], r in order (deterministic); distinct_rows (no row twice) lets
// the rows run in parallel.
void scale_add_rows(const float* src, const int32_t* rows, const float* weights, float* dst, int64_t R, int64_t H,
                    bool distinct_rows,
                    cudaStream_t s);
// y[t·k + j, :] = x[t, :] · experts[ids[t·k + j]]ᵀ: x [T, K];  experts: E device pointers to [N, K] weights
// of `type`;  y: [T·k, N]. A row whose id is outside [0, E) is written as NaN (ids live on the device).
void matmul_experts(const float* x, const void* const* experts, int64_t E, ElemType type, const int32_t* ids,
                    float* y, int64_t T, int64_t k, int64_t K, int64_t N, bool aligned, cudaStream_t s,
                    Epilogue act = Epilogue::none);
// out[t, :] = Σ_j weights[t·k + j] · y[t·k + j, :], j in order:  y [T·k, H];  out [T, H].
void moe_combine(const float* y, const float* weights, const float* addend, float* out, int64_t T, int64_t k, int64_t H,
                 cudaStream_t s);
// moe_sigmoid.cu — bias: [E] or nullptr.
constexpr int kMoeMaxGroups = 64;
constexpr int64_t kMoeMaxExperts = 2048;  // 64 experts a lane of the router's warp
void moe_route_sigmoid(const float* logits, const float* bias, int64_t T, int64_t E, int k, int n_group,
                       int topk_group, bool renormalize, float scaling, int32_t* ids, float* weights, cudaStream_t s);

}  // namespace kapitsa::ops::cuda::kernels
