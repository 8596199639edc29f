// The int8-activation GEMV for Q8_0, Q4_K, Q6_K, Q4_0, IQ4_NL, Q5_K and IQ4_XS blocks (decode, 1–8 tokens),
// as the cpu backend and
// llama.cpp do it: x is rounded once to int8 codes with one f32 scale per block of B inputs (dx =
// max|x| / 127, q = round-half-even(x / dx); B = 32 for Q8_0, 256 for the K-quants — the cpu backend's
// rounding bit for bit), then each weight unit is dotted in integers with __dp4a (four byte products a
// step) instead of decoded to floats: per unit the f32 work is one or two products. The codes' constant
// parts (Q4_K's minimum, Q6_K's −32) come out of Σq over 16 or 32 inputs. An output moves from ref's by at
// most Σ|w_k|·dx_k/2, the cpu backend's bound (tests/ops/test_ggml.cpp).
// One warp per row, lane l takes units l, l + 32, …; a unit is Q8_0's block (32 inputs), a Q4_K block's
// 64 inputs of one 32-byte run of codes, or a Q6_K block's 32 inputs of one scale pair. Each unit's
// codes are read once for every token; a token's sums do not depend on T.
#include "ops/cuda/ggml_blocks.cuh"

#include <cstdlib>
#include <cstring>

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kWarps = 4;  // rows of a block

// The rounded x in scratch: q int8 [T, K] (16-byte aligned rows), dx f32 [T, K/B], bsum16 int16 [T, K/16].
struct Act {
  const int8_t* q;
  const float* dx;
  const int16_t* bsum16;
  int64_t K, B;
};
size_t align16(size_t n) { return (n + 15) / 16 * 16; }
Act act_in(const void* scratch, int64_t T, int64_t K, int64_t B) {
  const auto* base = static_cast<const uint8_t*>(scratch);
  const size_t q_bytes = align16(static_cast<size_t>(T * K)), dx_bytes = align16(static_cast<size_t>(T * (K / B)) * 4);
  return Act{reinterpret_cast<const int8_t*>(base), reinterpret_cast<const float*>(base + q_bytes),
             reinterpret_cast<const int16_t*>(base + q_bytes + dx_bytes), K, B};
}

// One warp per block of B inputs (B / 32 consecutive inputs a lane): the block's max|x|, its codes, and
// Σq over each 16 inputs.
template <int B>
__global__ void quantize_x_int8_kernel(const float* __restrict__ x, int64_t T, int64_t K, int8_t* q, float* dx,
                                       int16_t* bsum16) {
  constexpr int kPer = B / 32;
  const int lane = threadIdx.x & 31;
  const int64_t blk = int64_t{blockIdx.x} * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (blk >= T * (K / B)) return;
  pdl_wait();
  const int64_t at = blk * B + lane * kPer;  // x and q are [T, K] row-major: blocks back to back
  float v[kPer], amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) v[i] = x[at + i], amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  int sum = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int c = max(-127, min(127, __float2int_rn(v[i] * inv)));
    q[at + i] = static_cast<int8_t>(c), sum += c;
  }
#pragma unroll
  for (int o = 1; o < 16 / kPer; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);  // lanes of one 16
  if (lane % (16 / kPer) == 0) bsum16[at / 16] = static_cast<int16_t>(sum);
  if (lane == 0) dx[blk] = amax / 127.0f;
}

__device__ __forceinline__ int4 load16(const int8_t* p) { return *reinterpret_cast<const int4*>(p); }

// ---- the units -----------------------------------------------------------------------------------

template <uint32_t Type> struct Unit;

// Q8_0: block u; y += (d·dx)·Σ q·x̂.
template <> struct Unit<ggml::q8_0> {
  static constexpr int kInputs = 32;
  float d;
  uint32_t q[8];
  __device__ __forceinline__ void load(const uint8_t* row, int64_t u) {
    const uint8_t* b = row + u * 34;
    d = ggml::load_bytes<2>(b).f16(0);
    const auto s = ggml::load_bytes<32>(b + 2);
#pragma unroll
    for (int i = 0; i < 8; ++i) q[i] = s.w[i];
  }
  __device__ __forceinline__ float dot(const Act& a, int64_t t, int64_t u) const {
    const int8_t* xq = a.q + t * a.K + u * 32;
    const int4 x0 = load16(xq), x1 = load16(xq + 16);
    int s = 0;
    s = __dp4a(static_cast<int>(q[0]), x0.x, s), s = __dp4a(static_cast<int>(q[1]), x0.y, s);
    s = __dp4a(static_cast<int>(q[2]), x0.z, s), s = __dp4a(static_cast<int>(q[3]), x0.w, s);
    s = __dp4a(static_cast<int>(q[4]), x1.x, s), s = __dp4a(static_cast<int>(q[5]), x1.y, s);
    s = __dp4a(static_cast<int>(q[6]), x1.z, s), s = __dp4a(static_cast<int>(q[7]), x1.w, s);
    return static_cast<float>(s) * (d * a.dx[t * (a.K / 32) + u]);
  }
};

// Q4_K: 32 bytes of block u / 4 (sub-blocks 2c in the low nibbles, 2c + 1 in the high ones, c = u % 4);
// y += (d·dx)·(sc₀Σq·x̂ + sc₁Σq·x̂) − (dmin·dx)·(m₀Σx̂ + m₁Σx̂).
template <> struct Unit<ggml::q4_k> {
  static constexpr int kInputs = 64;
  float d, dmin;
  int sc0, m0, sc1, m1;
  uint32_t q[8];
  __device__ __forceinline__ void load(const uint8_t* row, int64_t u) {
    const uint8_t* b = row + (u / 4) * 144;
    const int c = static_cast<int>(u % 4);
    const auto h = ggml::load_bytes<16>(b);
    const auto s = ggml::load_bytes<32>(b + 16 + 32 * c);
    d = h.f16(0), dmin = h.f16(2);
    ggml::scale_min_k4(2 * c, h.w[1], h.w[2], h.w[3], sc0, m0);
    ggml::scale_min_k4(2 * c + 1, h.w[1], h.w[2], h.w[3], sc1, m1);
#pragma unroll
    for (int i = 0; i < 8; ++i) q[i] = s.w[i];
  }
  __device__ __forceinline__ float dot(const Act& a, int64_t t, int64_t u) const {
    const int8_t* xq = a.q + t * a.K + u * 64;
    int lo = 0, hi = 0;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int4 xl = load16(xq + 16 * k), xh = load16(xq + 32 + 16 * k);
      const uint32_t* w = q + 4 * k;
      lo = __dp4a(static_cast<int>(w[0] & 0x0F0F0F0Fu), xl.x, lo), lo = __dp4a(static_cast<int>(w[1] & 0x0F0F0F0Fu), xl.y, lo);
      lo = __dp4a(static_cast<int>(w[2] & 0x0F0F0F0Fu), xl.z, lo), lo = __dp4a(static_cast<int>(w[3] & 0x0F0F0F0Fu), xl.w, lo);
      hi = __dp4a(static_cast<int>((w[0] >> 4) & 0x0F0F0F0Fu), xh.x, hi), hi = __dp4a(static_cast<int>((w[1] >> 4) & 0x0F0F0F0Fu), xh.y, hi);
      hi = __dp4a(static_cast<int>((w[2] >> 4) & 0x0F0F0F0Fu), xh.z, hi), hi = __dp4a(static_cast<int>((w[3] >> 4) & 0x0F0F0F0Fu), xh.w, hi);
    }
    const int16_t* bs = a.bsum16 + (t * a.K + u * 64) / 16;
    const int sum0 = bs[0] + bs[1], sum1 = bs[2] + bs[3];
    const float dx = a.dx[t * (a.K / 256) + u / 4];
    return static_cast<float>(sc0 * lo + sc1 * hi) * (d * dx) - static_cast<float>(m0 * sum0 + m1 * sum1) * (dmin * dx);
  }
};

// Q6_K: inputs 32i … 32i + 31 of half h of block u / 8 (i = u % 4, h = u / 4 % 2), codes q ∈ [0, 64) of
// scales s₀ (first 16) and s₁; y += (d·dx)·(s₀(Σq·x̂ − 32Σx̂) + s₁(…)).
template <> struct Unit<ggml::q6_k> {
  static constexpr int kInputs = 32;
  float d;
  int s0, s1;
  uint32_t q[8];
  __device__ __forceinline__ void load(const uint8_t* row, int64_t u) {
    const uint8_t* b = row + (u / 8) * 210;
    const int half = static_cast<int>(u / 4 % 2), i = static_cast<int>(u % 4);
    const auto ql = ggml::load_bytes<32>(b + 64 * half + 32 * (i & 1));
    const auto qh = ggml::load_bytes<32>(b + 128 + 32 * half);
    const auto sc = ggml::load_bytes<2>(b + 192 + 8 * half + 2 * i);
    d = ggml::load_bytes<2>(b + 208).f16(0);
    s0 = static_cast<int8_t>(sc.byte(0)), s1 = static_cast<int8_t>(sc.byte(1));
    const int lo_shift = 4 * (i >> 1), hi_shift = 2 * i;
#pragma unroll
    for (int k = 0; k < 8; ++k) q[k] = ((ql.w[k] >> lo_shift) & 0x0F0F0F0Fu) | (((qh.w[k] >> hi_shift) & 0x03030303u) << 4);
  }
  __device__ __forceinline__ float dot(const Act& a, int64_t t, int64_t u) const {
    const int8_t* xq = a.q + t * a.K + u * 32;
    const int4 x0 = load16(xq), x1 = load16(xq + 16);
    int a0 = 0, a1 = 0;
    a0 = __dp4a(static_cast<int>(q[0]), x0.x, a0), a0 = __dp4a(static_cast<int>(q[1]), x0.y, a0);
    a0 = __dp4a(static_cast<int>(q[2]), x0.z, a0), a0 = __dp4a(static_cast<int>(q[3]), x0.w, a0);
    a1 = __dp4a(static_cast<int>(q[4]), x1.x, a1), a1 = __dp4a(static_cast<int>(q[5]), x1.y, a1);
    a1 = __dp4a(static_cast<int>(q[6]), x1.z, a1), a1 = __dp4a(static_cast<int>(q[7]), x1.w, a1);
    const int16_t* bs = a.bsum16 + (t * a.K + u * 32) / 16;
    const int sum = s0 * (a0 - 32 * bs[0]) + s1 * (a1 - 32 * bs[1]);
    return static_cast<float>(sum) * (d * a.dx[t * (a.K / 256) + u / 8]);
  }
};

// ---- the other common types (session 25; their op tests passed on an H100 in session 26) ---------------

// Four 4-bit code-book entries (IQ4_NL / IQ4_XS levels): byte k of the result is the level of the code in
// byte k of q4 (0…15): two byte permutes of the 16-entry table, picked per byte by the code's bit 3.
__device__ __forceinline__ int iq4_levels4(uint32_t q4) {
  const uint32_t sel = (q4 & 0x7u) | ((q4 >> 4) & 0x70u) | ((q4 >> 8) & 0x700u) | ((q4 >> 12) & 0x7000u);
  const uint32_t lo = __byte_perm(0xBFAD9881u, 0xF6EADDCFu, sel), hi = __byte_perm(0x26190D01u, 0x71594535u, sel);
  const uint32_t high = ((q4 & 0x08080808u) >> 3) * 0xFFu;  // 0xFF in the bytes whose code is 8 or more
  return static_cast<int>((lo & ~high) | (hi & high));
}

// Q4_0 {d; qs[16]} (unit: the block): value j is the low nibble of qs[j], value j + 16 its high one, minus 8;
// y += (d·dx)·(Σ q·x̂ − 8Σx̂). IQ4_NL {d; qs[16]}: the same nibbles as code-book levels, no offset.
template <bool IQ4>
struct Nibbles32 {
  static constexpr int kInputs = 32;
  float d;
  uint32_t q[4];
  __device__ __forceinline__ void load(const uint8_t* row, int64_t u) {
    const auto s = ggml::load_bytes<18>(row + u * 18);
    d = s.f16(0);
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = s.u32(2 + 4 * i);
  }
  __device__ __forceinline__ float dot(const Act& a, int64_t t, int64_t u) const {
    const int8_t* xq = a.q + t * a.K + u * 32;
    const int4 x0 = load16(xq), x1 = load16(xq + 16);
    const int xl[4] = {x0.x, x0.y, x0.z, x0.w}, xh[4] = {x1.x, x1.y, x1.z, x1.w};
    int s = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t lo = q[i] & 0x0F0F0F0Fu, hi = (q[i] >> 4) & 0x0F0F0F0Fu;
      s = __dp4a(IQ4 ? iq4_levels4(lo) : static_cast<int>(lo), xl[i], s);
      s = __dp4a(IQ4 ? iq4_levels4(hi) : static_cast<int>(hi), xh[i], s);
    }
    if constexpr (!IQ4) {
      const int16_t* bs = a.bsum16 + (t * a.K + u * 32) / 16;
      s -= 8 * (bs[0] + bs[1]);
    }
    return static_cast<float>(s) * (d * a.dx[t * (a.K / 32) + u]);
  }
};
template <> struct Unit<ggml::q4_0> : Nibbles32<false> {};
template <> struct Unit<ggml::iq4_nl> : Nibbles32<true> {};

// Q5_K {d; dmin; scales[12]; qh[32]; qs[128]}: Q4_K's unit of 64 inputs plus a fifth bit from qh (bit 2c of
// qh[l] for the low-nibble half of the c-th 64 values, 2c + 1 for the high one).
template <> struct Unit<ggml::q5_k> {
  static constexpr int kInputs = 64;
  float d, dmin;
  int sc0, m0, sc1, m1;
  uint32_t lo[8], hi[8];
  __device__ __forceinline__ void load(const uint8_t* row, int64_t u) {
    const uint8_t* b = row + (u / 4) * 176;
    const int c = static_cast<int>(u % 4);
    const auto h = ggml::load_bytes<16>(b);
    const auto qh = ggml::load_bytes<32>(b + 16);
    const auto s = ggml::load_bytes<32>(b + 48 + 32 * c);
    d = h.f16(0), dmin = h.f16(2);
    ggml::scale_min_k4(2 * c, h.w[1], h.w[2], h.w[3], sc0, m0);
    ggml::scale_min_k4(2 * c + 1, h.w[1], h.w[2], h.w[3], sc1, m1);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      lo[i] = (s.w[i] & 0x0F0F0F0Fu) | (((qh.w[i] >> (2 * c)) & 0x01010101u) << 4);
      hi[i] = ((s.w[i] >> 4) & 0x0F0F0F0Fu) | (((qh.w[i] >> (2 * c + 1)) & 0x01010101u) << 4);
    }
  }
  __device__ __forceinline__ float dot(const Act& a, int64_t t, int64_t u) const {
    const int8_t* xq = a.q + t * a.K + u * 64;
    int sl = 0, sh = 0;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int4 xl = load16(xq + 16 * k), xh = load16(xq + 32 + 16 * k);
      sl = __dp4a(static_cast<int>(lo[4 * k]), xl.x, sl), sl = __dp4a(static_cast<int>(lo[4 * k + 1]), xl.y, sl);
      sl = __dp4a(static_cast<int>(lo[4 * k + 2]), xl.z, sl), sl = __dp4a(static_cast<int>(lo[4 * k + 3]), xl.w, sl);
      sh = __dp4a(static_cast<int>(hi[4 * k]), xh.x, sh), sh = __dp4a(static_cast<int>(hi[4 * k + 1]), xh.y, sh);
      sh = __dp4a(static_cast<int>(hi[4 * k + 2]), xh.z, sh), sh = __dp4a(static_cast<int>(hi[4 * k + 3]), xh.w, sh);
    }
    const int16_t* bs = a.bsum16 + (t * a.K + u * 64) / 16;
    const int sum0 = bs[0] + bs[1], sum1 = bs[2] + bs[3];
    const float dx = a.dx[t * (a.K / 256) + u / 4];
    return static_cast<float>(sc0 * sl + sc1 * sh) * (d * dx) - static_cast<float>(m0 * sum0 + m1 * sum1) * (dmin * dx);
  }
};

// IQ4_XS {d; scales_h u16; scales_l[4]; qs[128]}: unit u is sub-block u % 8 of block u / 8, laid out as an
// IQ4_NL block, with the 6-bit scale ls (stored + 32): y += (d·(ls − 32)·dx)·Σ level·x̂.
template <> struct Unit<ggml::iq4_xs> {
  static constexpr int kInputs = 32;
  float d;
  int ls;
  uint32_t q[4];
  __device__ __forceinline__ void load(const uint8_t* row, int64_t u) {
    const uint8_t* b = row + (u / 8) * 136;
    const int ib = static_cast<int>(u % 8);
    const auto h = ggml::load_bytes<8>(b);
    const auto s = ggml::load_bytes<16>(b + 8 + 16 * ib);
    d = h.f16(0);
    const uint32_t scales_h = h.u16(2), scales_l = h.w[1];
    ls = static_cast<int>(((scales_l >> (8 * (ib >> 1) + 4 * (ib & 1))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4)) - 32;
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = s.w[i];
  }
  __device__ __forceinline__ float dot(const Act& a, int64_t t, int64_t u) const {
    const int8_t* xq = a.q + t * a.K + u * 32;
    const int4 x0 = load16(xq), x1 = load16(xq + 16);
    const int xl[4] = {x0.x, x0.y, x0.z, x0.w}, xh[4] = {x1.x, x1.y, x1.z, x1.w};
    int s = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s = __dp4a(iq4_levels4(q[i] & 0x0F0F0F0Fu), xl[i], s);
      s = __dp4a(iq4_levels4((q[i] >> 4) & 0x0F0F0F0Fu), xh[i], s);
    }
    return static_cast<float>(s * ls) * (d * a.dx[t * (a.K / 256) + u / 8]);
  }
};

// y: [T, N] = x̂ · dequant(w)ᵀ, T ≤ MaxT; Routed as ggml.cu's GEMV (expert ids[p] on x̂ row p / k).
template <uint32_t Type, int MaxT, bool Routed>
__global__ void __launch_bounds__(kWarps * 32) ggml_gemv_int8_kernel(const Act act, const GgmlArgs a,
                                                                     const GgmlRoute route, float* __restrict__ y,
                                                                     int64_t T, int64_t N) {
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5);
  if (n >= N) return;
  const uint8_t* blocks = a.blocks;
  int64_t t0 = 0;
  if constexpr (Routed) {
    const int64_t p = blockIdx.y;
    pdl_wait();  // the router wrote ids
    const int32_t id = route.ids[p];
    t0 = p / route.k, y += p * N;
    if (id < 0 || id >= route.E) {
      if (lane == 0) y[n] = NAN;
      return;
    }
    blocks = route.table[id];
  }
  const uint8_t* row = blocks + n * a.row_bytes;
  const int64_t units = a.K / Unit<Type>::kInputs;
  Unit<Type> w;
  int64_t u = lane;
  if (u < units) w.load(row, u);  // weights: before waiting for x̂'s writer
  if constexpr (!Routed) pdl_wait();
  float acc[MaxT] = {};
  for (; u < units; u += 32) {
#pragma unroll
    for (int t = 0; t < MaxT; ++t) {
      if (MaxT > 1 && t >= T) break;
      acc[t] += w.dot(act, t0 + t, u);
    }
    if (u + 32 < units) w.load(row, u + 32);
  }
#pragma unroll
  for (int t = 0; t < MaxT; ++t) {
    if (MaxT > 1 && t >= T) break;
    const float s = warp_sum(acc[t]);
    if (lane == 0) y[t * N + n] = s;
  }
}

template <typename F>
bool with_int8_type(uint32_t type, F&& f) {
  switch (type) {
    case ggml::q8_0: f(std::integral_constant<uint32_t, ggml::q8_0>{}); return true;
    case ggml::q4_k: f(std::integral_constant<uint32_t, ggml::q4_k>{}); return true;
    case ggml::q6_k: f(std::integral_constant<uint32_t, ggml::q6_k>{}); return true;
    case ggml::q4_0: f(std::integral_constant<uint32_t, ggml::q4_0>{}); return true;
    case ggml::iq4_nl: f(std::integral_constant<uint32_t, ggml::iq4_nl>{}); return true;
    case ggml::q5_k: f(std::integral_constant<uint32_t, ggml::q5_k>{}); return true;
    case ggml::iq4_xs: f(std::integral_constant<uint32_t, ggml::iq4_xs>{}); return true;
    default: return false;
  }
}

}  // namespace

bool ggml_int8_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("KAPITSA_CUDA_GGML_INT8");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

int ggml_int8_block(uint32_t type) {
  if (type == ggml::q8_0 || type == ggml::q4_0 || type == ggml::iq4_nl) return 32;
  if (type == ggml::q4_k || type == ggml::q6_k || type == ggml::q5_k || type == ggml::iq4_xs) return 256;
  return 0;
}

size_t ggml_int8_scratch_bytes(int64_t T, int64_t K, int64_t B) {
  return align16(static_cast<size_t>(T * K)) + align16(static_cast<size_t>(T * (K / B)) * 4) +
         static_cast<size_t>(T * (K / 16)) * 2;
}

void quantize_x_int8(const float* x, int64_t T, int64_t K, int64_t B, void* scratch, cudaStream_t s) {
  if (T == 0 || K == 0) return;
  const Act act = act_in(scratch, T, K, B);
  auto* q = const_cast<int8_t*>(act.q);
  auto* dx = const_cast<float*>(act.dx);
  auto* bsum = const_cast<int16_t*>(act.bsum16);
  const int64_t blocks = T * (K / B);
  const dim3 grid(static_cast<unsigned>((blocks + 3) / 4));
  if (B == 32) launch(quantize_x_int8_kernel<32>, grid, dim3(128), s, x, T, K, q, dx, bsum);
  else launch(quantize_x_int8_kernel<256>, grid, dim3(128), s, x, T, K, q, dx, bsum);
}

void ggml_gemv_int8(const void* scratch, const GgmlArgs& a, float* y, int64_t T, int64_t N, cudaStream_t s) {
  if (T == 0 || N == 0) return;
  const Act act = act_in(scratch, T, a.K, ggml_int8_block(a.type));
  const dim3 grid(static_cast<unsigned>((N + kWarps - 1) / kWarps));
  with_int8_type(a.type, [&](auto tag) {
    constexpr uint32_t Type = decltype(tag)::value;
    const auto go = [&](auto kernel) { launch(kernel, grid, dim3(kWarps * 32), s, act, a, GgmlRoute{}, y, T, N); };
    if (T == 1) go(ggml_gemv_int8_kernel<Type, 1, false>);
    else go(ggml_gemv_int8_kernel<Type, kGemvMaxTokens, false>);
  });
}

void ggml_experts_int8(const void* scratch, const GgmlArgs& a, const GgmlRoute& route, float* y, int64_t T, int64_t N,
                       cudaStream_t s) {
  if (T == 0 || N == 0) return;
  const Act act = act_in(scratch, T, a.K, ggml_int8_block(a.type));
  const dim3 grid(static_cast<unsigned>((N + kWarps - 1) / kWarps), static_cast<unsigned>(T * route.k));
  with_int8_type(a.type, [&](auto tag) {
    constexpr uint32_t Type = decltype(tag)::value;
    launch(ggml_gemv_int8_kernel<Type, 1, true>, grid, dim3(kWarps * 32), s, act, a, route, y, int64_t{1}, N);
  });
}

}  // namespace kapitsa::ops::cuda::kernels
