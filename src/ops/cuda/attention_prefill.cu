// Causal GQA attention over paged KV for prompts (the varlen batch's prefill rows), tiled: a block
// takes kTileRows consecutive step rows of one query head (kRowsPerWarp a warp) and walks their keys in
// tiles of kTileKeys staged in shared memory, so a key is read once per kTileRows queries rather than
// once per query as attention.cu's kernel does (session 22's profile: 4.1 ms of the 4B shape's 512-token
// prefill). f32 FMAs throughout (no tensor cores: the op's bound against ref is 1e-5). Lane j scores key
// j of the tile against its warp's rows (K rows padded by 4 floats: the lanes' float4 reads hit distinct
// banks), online softmax a tile at a time per row, then each lane adds p · V into its output columns
// lane + 32·i. Rows of the block may belong to several sequences: the block walks them a segment
// (rows of one sequence) at a time, the keys of that sequence for the rows in it.
#include "ops/cuda/attention_varlen.h"
#include "ops/cuda/kernel_util.cuh"

#include <cstdint>
#include <type_traits>

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kTileRows = 32, kTileKeys = 32, kPrefillWarps = 4, kRowsPerWarp = kTileRows / kPrefillWarps;
constexpr int64_t kTiledMinRows = 64;  // below this many step rows (decode, verification) attention.cu's kernel

// Floats of shared memory for head dim D: q [kTileRows, D], K [kTileKeys, D + 4], V [kTileKeys, D].
size_t prefill_smem(int64_t D) {
  return sizeof(float) * static_cast<size_t>(kTileRows * D + kTileKeys * (D + 4) + kTileKeys * D);
}

// Four consecutive elements of a KV row (4-element aligned) as floats.
template <typename KV>
__device__ __forceinline__ float4 load4(const KV* p) {
  if constexpr (std::is_same_v<KV, float>) {
    return *reinterpret_cast<const float4*>(p);
  } else {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const KV* e = reinterpret_cast<const KV*>(&raw);
    return make_float4(to_float(e[0]), to_float(e[1]), to_float(e[2]), to_float(e[3]));
  }
}

// kSlots = D / 32 output columns a lane.
template <typename KV, int kSlots>
__global__ void __launch_bounds__(kPrefillWarps * 32) attention_prefill_kernel(AttentionArgs a, VarlenRows vr) {
  constexpr int D = kSlots * 32, KS = D + 4;  // KS: the padded K row stride
  extern __shared__ float4 smem4[];
  float* q_s = reinterpret_cast<float*>(smem4);  // [kTileRows, D]
  float* k_s = q_s + kTileRows * D;             // [kTileKeys, KS]
  float* v_s = k_s + kTileKeys * KS;            // [kTileKeys, D]
  pdl_trigger();
  pdl_wait();
  const int64_t h = blockIdx.x, g = h / (a.Hq / a.Hkv);
  const int64_t r_begin = int64_t{blockIdx.y} * kTileRows, r_end = min(a.T, r_begin + kTileRows);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int i = threadIdx.x; i < kTileRows * D / 4; i += blockDim.x) {
    const int64_t r = r_begin + i / (D / 4);
    reinterpret_cast<float4*>(q_s)[i] =
        r < r_end ? *reinterpret_cast<const float4*>(a.q + (r * a.Hq + h) * D + 4 * (i % (D / 4))) : make_float4(0, 0, 0, 0);
  }
  const KV* k = static_cast<const KV*>(a.k);
  const KV* v = static_cast<const KV*>(a.v);
  const int64_t w0 = r_begin + warp * kRowsPerWarp;  // this warp's first row
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kSlots];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
    for (int j = 0; j < kSlots; ++j) acc[r][j] = 0.0f;
  }

  for (int64_t seg = r_begin; seg < r_end;) {  // block-uniform: one sequence's rows at a time
    const int64_t i = seq_of_row(vr, seg);
    const int64_t seg_end = min(r_end, vr.row_offsets[i + 1]);
    const int64_t keys0 = vr.positions0[i] - vr.row_offsets[i] + 1;  // row r sees keys [0, keys0 + r)
    const int32_t* table = vr.block_tables + vr.block_offsets[i];
    const int64_t n_keys = keys0 + seg_end - 1;  // the segment's last row sees the most
    for (int64_t s0 = 0; s0 < n_keys; s0 += kTileKeys) {
      __syncthreads();  // the previous tile (and, first, the q tile's stores) done with
      for (int e = threadIdx.x; e < kTileKeys * D / 4; e += blockDim.x) {
        const int j = e / (D / 4), d = 4 * (e % (D / 4));
        const int64_t s = s0 + j;
        float4 kv = make_float4(0, 0, 0, 0), vv = kv;
        if (s < n_keys) {
          const int64_t row = int64_t{table[s / a.page_tokens]} * a.page_tokens + s % a.page_tokens;
          kv = load4(k + (row * a.Hkv + g) * D + d), vv = load4(v + (row * a.Hkv + g) * D + d);
        }
        *reinterpret_cast<float4*>(k_s + j * KS + d) = kv;
        *reinterpret_cast<float4*>(v_s + j * D + d) = vv;
      }
      __syncthreads();
      // Scores: lane = key s0 + lane against the warp's rows.
      float score[kRowsPerWarp] = {};
      for (int d = 0; d < D; d += 4) {
        const float4 kk = *reinterpret_cast<const float4*>(k_s + lane * KS + d);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          const float4 qq = *reinterpret_cast<const float4*>(q_s + (warp * kRowsPerWarp + r) * D + d);
          score[r] = fmaf(qq.x, kk.x, score[r]);
          score[r] = fmaf(qq.y, kk.y, score[r]);
          score[r] = fmaf(qq.z, kk.z, score[r]);
          score[r] = fmaf(qq.w, kk.w, score[r]);
        }
      }
      float p[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int64_t row = w0 + r, s = s0 + lane;
        const bool live = row >= seg && row < seg_end && s < keys0 + row;
        const float sc = live ? score[r] * a.scale : -INFINITY;
        const float tile_max = warp_max(sc);
        p[r] = 0.0f;
        if (tile_max == -INFINITY) continue;  // warp-uniform: no key of this tile for this row
        const float m_new = fmaxf(m[r], tile_max), correction = expf(m[r] - m_new);
        p[r] = live ? expf(sc - m_new) : 0.0f;
        l[r] = l[r] * correction + warp_sum(p[r]);
        m[r] = m_new;
#pragma unroll
        for (int j = 0; j < kSlots; ++j) acc[r][j] *= correction;
      }
      const int n = n_keys - s0 < kTileKeys ? static_cast<int>(n_keys - s0) : kTileKeys;
      for (int jk = 0; jk < n; ++jk) {
        float vv[kSlots];
#pragma unroll
        for (int j = 0; j < kSlots; ++j) vv[j] = v_s[jk * D + lane + 32 * j];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          const float pr = __shfl_sync(0xffffffffu, p[r], jk);
#pragma unroll
          for (int j = 0; j < kSlots; ++j) acc[r][j] = fmaf(pr, vv[j], acc[r][j]);
        }
      }
    }
    seg = seg_end;
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t row = w0 + r;
    if (row >= r_end) break;
#pragma unroll
    for (int j = 0; j < kSlots; ++j) a.o[(row * a.Hq + h) * D + lane + 32 * j] = acc[r][j] / l[r];
  }
}

template <typename KV>
void launch_prefill(const AttentionArgs& a, const VarlenRows& vr, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(a.Hq), static_cast<unsigned>((a.T + kTileRows - 1) / kTileRows));
  const size_t smem = prefill_smem(a.D);
  switch (a.D) {
    case 64: launch_smem(attention_prefill_kernel<KV, 2>, grid, kPrefillWarps * 32, smem, s, a, vr); break;
    case 128: launch_smem(attention_prefill_kernel<KV, 4>, grid, kPrefillWarps * 32, smem, s, a, vr); break;
    default: launch_smem(attention_prefill_kernel<KV, 8>, grid, kPrefillWarps * 32, smem, s, a, vr); break;
  }
}

template <typename KV>
void opt_in() {  // above 48 KB of dynamic shared memory a kernel must opt in (D = 256: 97 KB)
  const int most = static_cast<int>(prefill_smem(kAttentionMaxHeadDim));
  cudaFuncSetAttribute(attention_prefill_kernel<KV, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
  cudaFuncSetAttribute(attention_prefill_kernel<KV, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
  cudaFuncSetAttribute(attention_prefill_kernel<KV, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
}

}  // namespace

bool attention_prefill_takes(const AttentionArgs& a) {
  return a.T >= kTiledMinRows && a.splits == 1 && (a.D == 64 || a.D == 128 || a.D == 256) &&
         reinterpret_cast<uintptr_t>(a.q) % 16 == 0;
}

void attention_prefill(const AttentionArgs& a, const VarlenRows& rows, cudaStream_t s) {
  static const bool opted_in = [] {
    opt_in<float>(), opt_in<__half>(), opt_in<__nv_bfloat16>();
    return true;
  }();
  (void)opted_in;
  switch (a.kv_type) {
    case ElemType::f16: launch_prefill<__half>(a, rows, s); break;
    case ElemType::bf16: launch_prefill<__nv_bfloat16>(a, rows, s); break;
    default: launch_prefill<float>(a, rows, s); break;
  }
}

}  // namespace kapitsa::ops::cuda::kernels
