// Kernels of partial NeoX RoPE, causal GQA attention (contiguous or paged KV; f32, bf16 or f16 pages
// widened as read; one sequence, or a batch with per-row key counts and block tables), and the paged
// KV store (rows converted to the pages' dtype, round to nearest even, as the host conversions).
// RoPE computes angle = float32(pos · inv_freq) and its cos/sin in double rounded to f32, as the
// reference (logits at long positions are sensitive to the angle's rounding).
// Attention is a plain, correct kernel, not yet a flash kernel: one block per (query, head, key range);
// for heads of ≤ 64, each warp takes tiles of 32 keys of the range (every n_warps-th tile), a key a lane:
// each lane reads its key's row and computes its score, the warp takes the tile's max and sum (online
// softmax, a tile at a time), then walks the tile's keys for the values (each lane holding D/32 output
// columns); wider heads take a key a warp (every n_warps-th key of the range, a warp-wide dot product,
// online softmax a key at a time; on an H100 the tiles made the 4B shape's 256-wide heads slower,
// 16.8 → 20.3 µs a layer at 512 keys, while the demo's 64-wide ones went 16 → 12.5 µs); the
// warps' partial results merge in shared memory. (A key at a time — a dependent page-table load, row
// load and warp sum per key — cost ~16 µs for one decode row's 32–64 keys a warp.)
// With one range the block writes o; with several (split-K, for decode with few queries × heads) each
// writes its unnormalised partial (m, l, acc) and a second kernel combines them. Keys are re-read for
// every query (no tiling across queries); prompts of 64 rows or more take attention_prefill.cu's tiled
// kernel instead (4B shape, 512-token prefill on an H100: 14886 → 15649 tok/s with the float4 scan, session 40).
#include "ops/cuda/attention_varlen.h"
#include "ops/cuda/kernel_util.cuh"

#include <cmath>

namespace kapitsa::ops::cuda::kernels {
namespace {

// One (token, head) per (blockIdx.y, blockIdx.z): the heads in parallel (a loop over them waited on
// each head's loads in turn, 4.5 µs for one decode token's 16 heads); cos/sin recomputed per head.
__global__ void rope_neox_kernel(float* x, const int32_t* positions, const float* inv_freq, int64_t H, int64_t D,
                                 int half) {
  const int64_t t = blockIdx.y, h = blockIdx.z;
  pdl_trigger();
  pdl_wait();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= half) return;
  const float angle = __fmul_rn(static_cast<float>(positions[t]), inv_freq[i]);
  const float c = static_cast<float>(cos(static_cast<double>(angle)));
  const float s = static_cast<float>(sin(static_cast<double>(angle)));
  float* head = x + (t * H + h) * D;
  const float x1 = head[i], x2 = head[i + half];
  head[i] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  head[i + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

constexpr int kAttnWarps = 4;
// kSlots: output columns per lane (D ≤ 32·kSlots), an instance each for D ≤ 64 (tiles of keys, below),
// 128 and 256.
template <typename KV, int kSlots>
__global__ void __launch_bounds__(kAttnWarps * 32) attention_kernel(AttentionArgs a, VarlenRows vr, int64_t row0) {
  __shared__ float q_s[kAttentionMaxHeadDim];
  __shared__ float acc_s[kAttnWarps][kAttentionMaxHeadDim];
  __shared__ float m_s[kAttnWarps], l_s[kAttnWarps];
  pdl_trigger();
  pdl_wait();
  const int64_t h = blockIdx.x, t = blockIdx.y, D = a.D;
  const int64_t g = h / (a.Hq / a.Hkv);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) q_s[d] = a.q[(t * a.Hq + h) * D + d];
  __syncthreads();

  const int64_t split = blockIdx.z;
  int64_t n_keys = a.row_keys != nullptr ? a.row_keys[t] : a.q_pos0 + t + 1;
  const int32_t* table = a.row_table != nullptr ? a.block_table + a.row_table[t] : a.block_table;
  if (vr.row_offsets != nullptr) {  // varlen with device metadata: this row's sequence
    const int64_t r = row0 + t, i = seq_of_row(vr, r);
    n_keys = vr.positions0[i] + (r - vr.row_offsets[i]) + 1;
    table = vr.block_tables + vr.block_offsets[i];
  }
  const KV* k = static_cast<const KV*>(a.k);
  const KV* v = static_cast<const KV*>(a.v);
  const int64_t key_begin = a.splits > 1 ? split * a.keys_per_split : 0;
  const int64_t key_end = a.splits > 1 ? min(n_keys, key_begin + a.keys_per_split) : n_keys;
  float m = -INFINITY, l = 0.0f, acc[kSlots] = {};
  if constexpr (kSlots == 2) {
    // Heads of ≤ 64: tiles of 32 keys, a key a lane.
    const bool vector_rows = D % (16 / sizeof(KV)) == 0;  // rows start 16-byte aligned: read them in uint4s
    for (int64_t s0 = key_begin + 32 * warp; s0 < key_end; s0 += 32 * kAttnWarps) {
      const int64_t s = s0 + lane;
      const bool live = s < key_end;
      const int64_t row =
          !live ? 0 : table == nullptr ? s : int64_t{table[s / a.page_tokens]} * a.page_tokens + s % a.page_tokens;
      float dot = 0.0f;
      if (live) {
        const KV* ks = k + (row * a.Hkv + g) * D;
        float dots[4] = {};  // four partial sums: a shorter chain of dependent FMAs
        if (vector_rows) {
          constexpr int kPer = 16 / sizeof(KV);
          for (int64_t d0 = 0; d0 < D; d0 += kPer) {
            const uint4 raw = *reinterpret_cast<const uint4*>(ks + d0);
            const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              if constexpr (sizeof(KV) == 4) {
                dots[i] = fmaf(q_s[d0 + i], __uint_as_float(words[i]), dots[i]);
              } else {
                float lo, hi;
                if constexpr (std::is_same_v<KV, __nv_bfloat16>) {
                  lo = __uint_as_float(words[i] << 16), hi = __uint_as_float(words[i] & 0xffff0000u);
                } else {
                  lo = __half2float(__ushort_as_half(static_cast<unsigned short>(words[i])));
                  hi = __half2float(__ushort_as_half(static_cast<unsigned short>(words[i] >> 16)));
                }
                dots[i] = fmaf(q_s[d0 + 2 * i], lo, dots[i]);
                dots[i] = fmaf(q_s[d0 + 2 * i + 1], hi, dots[i]);
              }
            }
          }
          dot = (dots[0] + dots[1]) + (dots[2] + dots[3]);
        } else {
          for (int64_t d = 0; d < D; ++d) dot += q_s[d] * to_float(ks[d]);
        }
      }
      const float score = live ? dot * a.scale : -INFINITY;
      const float m_new = fmaxf(m, warp_max(score));  // finite: the tile's first key is live
      const float correction = expf(m - m_new), p = live ? expf(score - m_new) : 0.0f;
      l = l * correction + warp_sum(p);
#pragma unroll
      for (int j = 0; j < kSlots; ++j) acc[j] *= correction;
      const int n = key_end - s0 < 32 ? static_cast<int>(key_end - s0) : 32;
#pragma unroll 16
      for (int i = 0; i < n; ++i) {
        const float pi = __shfl_sync(0xffffffffu, p, i);
        const KV* vs = v + (__shfl_sync(0xffffffffu, row, i) * a.Hkv + g) * D;
#pragma unroll
        for (int j = 0; j < kSlots; ++j) {
          const int64_t d = lane + 32 * j;
          if (d < D) acc[j] = fmaf(pi, to_float(vs[d]), acc[j]);
        }
      }
      m = m_new;
    }
  } else {
    // Wider heads: a warp a key, every n_warps-th key of the range (a warp-wide dot product and sum).
    for (int64_t s = key_begin + warp; s < key_end; s += kAttnWarps) {
      const int64_t row =
          table == nullptr ? s : int64_t{table[s / a.page_tokens]} * a.page_tokens + s % a.page_tokens;
      const KV* ks = k + (row * a.Hkv + g) * D;
      const KV* vs = v + (row * a.Hkv + g) * D;
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < kSlots; ++j) {
        const int64_t d = lane + 32 * j;
        if (d < D) dot += q_s[d] * to_float(ks[d]);
      }
      const float score = warp_sum(dot) * a.scale;
      const float m_new = fmaxf(m, score);
      const float correction = expf(m - m_new), p = expf(score - m_new);
      l = l * correction + p;
#pragma unroll
      for (int j = 0; j < kSlots; ++j) {
        const int64_t d = lane + 32 * j;
        if (d < D) acc[j] = acc[j] * correction + p * to_float(vs[d]);
      }
      m = m_new;
    }
  }
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    const int64_t d = lane + 32 * j;
    if (d < D) acc_s[warp][d] = acc[j];
  }
  if (lane == 0) m_s[warp] = m, l_s[warp] = l;
  __syncthreads();

  float m_all = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) m_all = fmaxf(m_all, m_s[w]);
  float weight[kAttnWarps], l_all = 0.0f;
  for (int w = 0; w < kAttnWarps; ++w) {  // a warp that saw no key has m = -inf: weight 0
    weight[w] = l_s[w] > 0.0f ? expf(m_s[w] - m_all) : 0.0f;
    l_all += l_s[w] * weight[w];
  }
  if (a.splits == 1) {
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      float o = 0.0f;
      for (int w = 0; w < kAttnWarps; ++w) o += acc_s[w][d] * weight[w];
      a.o[(t * a.Hq + h) * D + d] = o / l_all;
    }
    return;
  }
  // Partial of this key range: [m, l, acc[0..D)] (an empty range leaves m = -inf, l = 0).
  float* part = a.partials + ((t * a.Hq + h) * a.splits + split) * (D + 2);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) o += acc_s[w][d] * weight[w];
    part[2 + d] = o;
  }
  if (threadIdx.x == 0) part[0] = m_all, part[1] = l_all;
}

// o[t, h, :] from the splits' partials: weights exp(m_s − max m) on each l_s and acc_s.
__global__ void attention_combine_kernel(AttentionArgs a) {
  pdl_trigger();
  pdl_wait();
  const int64_t h = blockIdx.x, t = blockIdx.y, D = a.D;
  const float* parts = a.partials + (t * a.Hq + h) * a.splits * (D + 2);
  float m_all = -INFINITY;
  for (int64_t s = 0; s < a.splits; ++s) m_all = fmaxf(m_all, parts[s * (D + 2)]);
  float l_all = 0.0f;
  for (int64_t s = 0; s < a.splits; ++s) {
    const float l = parts[s * (D + 2) + 1];
    if (l > 0.0f) l_all += l * expf(parts[s * (D + 2)] - m_all);
  }
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int64_t s = 0; s < a.splits; ++s) {
      const float* p = parts + s * (D + 2);
      if (p[1] > 0.0f) o += p[2 + d] * expf(p[0] - m_all);
    }
    a.o[(t * a.Hq + h) * D + d] = o / l_all;
  }
}

// Page row of step row t: given per row (dest_rows), or found from the batch's arrays (varlen).
struct ListedDest {
  const int64_t* dest_rows;
  __device__ int64_t operator()(int64_t t) const { return dest_rows[t]; }
};
struct VarlenDest {
  VarlenRows vr;
  int64_t page_tokens;
  __device__ int64_t operator()(int64_t t) const {
    const int64_t i = seq_of_row(vr, t), pos = vr.positions0[i] + (t - vr.row_offsets[i]);
    return int64_t{vr.block_tables[vr.block_offsets[i] + pos / page_tokens]} * page_tokens + pos % page_tokens;
  }
};

// A KV page element from f32 (round to nearest even).
template <typename P>
__device__ __forceinline__ P to_page(float v) {
  if constexpr (std::is_same_v<P, __half>) return __float2half_rn(v);
  else if constexpr (std::is_same_v<P, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else return v;
}

template <typename P, typename Dest>
__global__ void write_paged_rows_kernel(const float* rows, P* pages, Dest dest, int64_t row0, int64_t row) {
  pdl_trigger();
  pdl_wait();
  const int64_t t = row0 + blockIdx.y;
  P* dst = pages + dest(t) * row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < row; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = rows[t * row + i];
    dst[i] = to_page<P>(v);
  }
}

// attention_prep_varlen: block (head, row) of the Hq + 2·Hkv heads, thread d holds element d. A query
// or key head: RMSNorm (as rms_norm_regs_kernel: inv = rsqrt(Σx²/D + eps), x · inv · (offset + w)),
// the normalised row through shared memory, then RoPE exactly as rope_neox_kernel, into q or the key
// page; a value head is stored as is. The norm weights are read before pdl_wait().
template <typename P>
__global__ void attention_prep_kernel(AttentionPrepArgs a, VarlenDest dest, int64_t row0) {
  __shared__ float y_s[kAttentionMaxHeadDim];
  __shared__ float red[32];
  pdl_trigger();
  const int64_t t = row0 + blockIdx.y, head = blockIdx.x, D = a.D;
  const int d = threadIdx.x;
  const bool is_q = head < a.Hq, is_k = !is_q && head < a.Hq + a.Hkv;
  const float wn = d < D && (is_q || is_k) ? (is_q ? a.q_norm : a.k_norm)[d] : 0.0f;
  pdl_wait();
  if (!is_q && !is_k) {
    const int64_t h = head - a.Hq - a.Hkv;
    if (d < D) static_cast<P*>(a.v_pages)[(dest(t) * a.Hkv + h) * D + d] = to_page<P>(a.v[(t * a.Hkv + h) * D + d]);
    return;
  }
  const int64_t h = is_q ? head : head - a.Hq;
  const float* src = is_q ? a.qg + (t * a.Hq + h) * 2 * D : a.k + (t * a.Hkv + h) * D;
  const float x = d < D ? src[d] : 0.0f;
  if (is_q && d < D) a.gate[(t * a.Hq + h) * D + d] = src[D + d];
  const float inv = rsqrtf(block_sum(x * x, red) / static_cast<float>(D) + a.eps);
  const float y = x * inv * (a.weight_offset + wn);
  if (d < D) y_s[d] = y;
  __syncthreads();
  float out = y;
  const int half = a.half;
  if (d < 2 * half) {
    const int i = d < half ? d : d - half;
    const float angle = __fmul_rn(static_cast<float>(a.positions[t]), a.inv_freq[i]);
    const float c = static_cast<float>(cos(static_cast<double>(angle)));
    const float s = static_cast<float>(sin(static_cast<double>(angle)));
    const float x1 = y_s[i], x2 = y_s[i + half];
    out = d < half ? __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)) : __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
  }
  if (d < D) {
    if (is_q) a.q[(t * a.Hq + h) * D + d] = out;
    else static_cast<P*>(a.k_pages)[(dest(t) * a.Hkv + h) * D + d] = to_page<P>(out);
  }
}

template <typename Dest>
void launch_write_paged_rows(const float* rows, void* pages, ElemType type, Dest dest, int64_t T, int64_t row,
                             cudaStream_t s) {
  if (T == 0 || row == 0) return;
  constexpr int kThreads = 256;
  const dim3 block(kThreads);
  const unsigned x_blocks = static_cast<unsigned>((row + kThreads - 1) / kThreads);
  for (int64_t t0 = 0; t0 < T; t0 += 65535) {  // gridDim.y is at most 65535
    const dim3 grid(x_blocks, static_cast<unsigned>(T - t0 < 65535 ? T - t0 : 65535));
    switch (type) {
      case ElemType::f16:
        launch(write_paged_rows_kernel<__half, Dest>, grid, block, s, rows, static_cast<__half*>(pages), dest, t0, row);
        break;
      case ElemType::bf16:
        launch(write_paged_rows_kernel<__nv_bfloat16, Dest>, grid, block, s, rows, static_cast<__nv_bfloat16*>(pages), dest, t0, row);
        break;
      default: launch(write_paged_rows_kernel<float, Dest>, grid, block, s, rows, static_cast<float*>(pages), dest, t0, row); break;
    }
  }
}

}  // namespace

void write_paged_rows(const float* rows, void* pages, ElemType type, const int64_t* dest_rows, int64_t T, int64_t row,
                      cudaStream_t s) {
  launch_write_paged_rows(rows, pages, type, ListedDest{dest_rows}, T, row, s);
}

void write_paged_rows_varlen(const float* rows, void* pages, ElemType type, const VarlenRows& seqs,
                             int64_t page_tokens, int64_t T, int64_t row, cudaStream_t s) {
  launch_write_paged_rows(rows, pages, type, VarlenDest{seqs, page_tokens}, T, row, s);
}

void attention_prep_varlen(const AttentionPrepArgs& a, const VarlenRows& rows, cudaStream_t s) {
  if (a.T == 0) return;
  const VarlenDest dest{rows, a.page_tokens};
  const int threads = static_cast<int>((a.D + 31) / 32 * 32);
  for (int64_t t0 = 0; t0 < a.T; t0 += 65535) {  // gridDim.y is at most 65535
    const dim3 grid(static_cast<unsigned>(a.Hq + 2 * a.Hkv), static_cast<unsigned>(a.T - t0 < 65535 ? a.T - t0 : 65535));
    switch (a.kv_type) {
      case ElemType::f16: launch(attention_prep_kernel<__half>, grid, threads, s, a, dest, t0); break;
      case ElemType::bf16: launch(attention_prep_kernel<__nv_bfloat16>, grid, threads, s, a, dest, t0); break;
      default: launch(attention_prep_kernel<float>, grid, threads, s, a, dest, t0); break;
    }
  }
}

void rope_neox(float* x, const int32_t* positions, const float* inv_freq, int64_t T, int64_t H, int64_t D, int half,
               cudaStream_t s) {
  if (T == 0 || H == 0) return;
  constexpr int kThreads = 64;
  for (int64_t t0 = 0; t0 < T; t0 += 65535) {  // gridDim.y is at most 65535
    const int64_t n = T - t0 < 65535 ? T - t0 : 65535;
    const dim3 grid(static_cast<unsigned>((half + kThreads - 1) / kThreads), static_cast<unsigned>(n), static_cast<unsigned>(H));
    launch(rope_neox_kernel, grid, kThreads, s, x + t0 * H * D, positions + t0, inv_freq, H, D, half);
  }
}

namespace {
void launch_attention(const AttentionArgs& a, const VarlenRows& vr, cudaStream_t s) {
  if (a.T == 0 || a.Hq == 0) return;
  for (int64_t t0 = 0; t0 < a.T; t0 += 65535) {  // gridDim.y is at most 65535
    AttentionArgs part = a;
    part.T = a.T - t0 < 65535 ? a.T - t0 : 65535;
    part.q = a.q + t0 * a.Hq * a.D;
    part.o = a.o + t0 * a.Hq * a.D;
    part.q_pos0 = a.q_pos0 + t0;
    if (a.row_keys != nullptr) part.row_keys = a.row_keys + t0, part.row_table = a.row_table + t0;
    if (a.splits > 1) part.partials = a.partials + t0 * a.Hq * a.splits * (a.D + 2);
    const dim3 grid(static_cast<unsigned>(a.Hq), static_cast<unsigned>(part.T), static_cast<unsigned>(a.splits));
    auto go = [&](auto kv) {
      using KV = decltype(kv);
      if (a.D <= 64) launch(attention_kernel<KV, 2>, grid, kAttnWarps * 32, s, part, vr, t0);
      else if (a.D <= 128) launch(attention_kernel<KV, 4>, grid, kAttnWarps * 32, s, part, vr, t0);
      else launch(attention_kernel<KV, 8>, grid, kAttnWarps * 32, s, part, vr, t0);
    };
    switch (a.kv_type) {
      case ElemType::f16: go(__half{}); break;
      case ElemType::bf16: go(__nv_bfloat16{}); break;
      default: go(float{}); break;
    }
    if (a.splits > 1)
      launch(attention_combine_kernel, dim3(static_cast<unsigned>(a.Hq), static_cast<unsigned>(part.T)), 128, s, part);
  }
}

}  // namespace

void attention(const AttentionArgs& a, cudaStream_t s) { launch_attention(a, VarlenRows{}, s); }

void attention_varlen(const AttentionArgs& a, const VarlenRows& rows, cudaStream_t s) {
  if (attention_prefill_takes(a)) return attention_prefill(a, rows, s);
  launch_attention(a, rows, s);
}

}  // namespace kapitsa::ops::cuda::kernels
