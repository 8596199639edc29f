// Internal to ops/cuda's .cu files: llama.cpp's block types decoded on the device, 32 values (a "unit")
// at a time — a whole block of the 32-value types, one eighth of a 256-value K-quant block. Each value
// comes out in the f32 arithmetic of ref's decoder (src/ops/ref/dequantize_ggml.cpp, which documents
// every layout), with products and sums rounded separately (__fmul_rn / __fsub_rn: no FMA contraction),
// so a dequantized row is bit-equal to ref's.
// Blocks are 2-byte aligned at best (Q8_0: 34 bytes, Q6_K: 210; MXFP4: 17): load_bytes reads the
// aligned 32-bit words inside a byte range (a partial last word byte by byte, never past the range) and
// shifts them into place, so a unit costs a few word loads, not one load per byte. Plain (generic)
// loads: the GEMV decodes rows it staged in shared memory.
#pragma once

#include "ops/cuda/kernel_util.cuh"

#include <cuda_fp8.h>

namespace kapitsa::ops::cuda::kernels::ggml {

// ggml's type numbers (tensor/ggml_type.h; repeated here because the .cu files take no host headers).
enum Type : uint32_t {
  q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14,
  iq4_nl = 20, iq4_xs = 23, mxfp4 = 39, f8_e4m3_32 = 1000, fp4_e2m1_32 = 1001,
};

template <uint32_t T> struct Geometry;  // values and bytes of a block
template <> struct Geometry<q4_0> { static constexpr int size = 32, bytes = 18; };
template <> struct Geometry<q4_1> { static constexpr int size = 32, bytes = 20; };
template <> struct Geometry<q5_0> { static constexpr int size = 32, bytes = 22; };
template <> struct Geometry<q5_1> { static constexpr int size = 32, bytes = 24; };
template <> struct Geometry<q8_0> { static constexpr int size = 32, bytes = 34; };
template <> struct Geometry<q2_k> { static constexpr int size = 256, bytes = 84; };
template <> struct Geometry<q3_k> { static constexpr int size = 256, bytes = 110; };
template <> struct Geometry<q4_k> { static constexpr int size = 256, bytes = 144; };
template <> struct Geometry<q5_k> { static constexpr int size = 256, bytes = 176; };
template <> struct Geometry<q6_k> { static constexpr int size = 256, bytes = 210; };
template <> struct Geometry<iq4_nl> { static constexpr int size = 32, bytes = 18; };
template <> struct Geometry<iq4_xs> { static constexpr int size = 256, bytes = 136; };
template <> struct Geometry<mxfp4> { static constexpr int size = 32, bytes = 17; };
template <> struct Geometry<f8_e4m3_32> { static constexpr int size = 32, bytes = 36; };
template <> struct Geometry<fp4_e2m1_32> { static constexpr int size = 32, bytes = 24; };

// N bytes from p (any alignment), byte j at bits 8·(j % 4) of w[j / 4].
template <int N>
struct Bytes {
  uint32_t w[(N + 3) / 4];
  __device__ __forceinline__ uint32_t byte(int j) const { return (w[j >> 2] >> ((j & 3) * 8)) & 0xFFu; }
  __device__ __forceinline__ uint32_t u16(int j) const { return byte(j) | (byte(j + 1) << 8); }
  __device__ __forceinline__ uint32_t u32(int j) const { return u16(j) | (u16(j + 2) << 16); }
  __device__ __forceinline__ float f16(int j) const { return __half2float(__ushort_as_half(static_cast<unsigned short>(u16(j)))); }
  __device__ __forceinline__ float f32(int j) const { return __uint_as_float(u32(j)); }
};

// Word i of base holding only its bytes below `end` (bytes from base): a partial word is read byte by
// byte, so nothing past the requested range is touched (the last block of a weight ends its allocation).
__device__ __forceinline__ uint32_t word_below(const uint32_t* base, int i, unsigned end) {
  const int have = static_cast<int>(end) - 4 * i;
  if (have >= 4) return base[i];
  uint32_t w = 0;
  const auto* q = reinterpret_cast<const uint8_t*>(base + i);
  for (int b = 0; b < have; ++b) w |= static_cast<uint32_t>(q[b]) << (8 * b);
  return w;
}

template <int N>
__device__ __forceinline__ Bytes<N> load_bytes(const uint8_t* p) {
  constexpr int W = (N + 3) / 4;
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  const auto* base = reinterpret_cast<const uint32_t*>(at & ~uintptr_t{3});
  const unsigned offset = static_cast<unsigned>(at & 3), end = offset + N;
  uint32_t raw[W + 1];
#pragma unroll
  for (int i = 0; i + 1 < W; ++i) raw[i] = base[i];  // end ≥ 4(W − 1) + 1: whole words
  raw[W - 1] = word_below(base, W - 1, end);
  raw[W] = word_below(base, W, end);
  Bytes<N> b;
#pragma unroll
  for (int i = 0; i < W; ++i) b.w[i] = __funnelshift_r(raw[i], raw[i + 1], offset * 8);
  return b;
}

// Byte j (run-time) of the little-endian words w0 w1 w2.
__device__ __forceinline__ uint32_t byte_of(uint32_t w0, uint32_t w1, uint32_t w2, int j) {
  const uint32_t w = j < 4 ? w0 : (j < 8 ? w1 : w2);
  return (w >> ((j & 3) * 8)) & 0xFFu;
}

// Entry q (0…15) of a table of 16 signed bytes packed little-endian in t0…t3.
__device__ __forceinline__ int lookup16(uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3, uint32_t q) {
  const uint32_t b = q < 8 ? __byte_perm(t0, t1, q) : __byte_perm(t2, t3, q - 8);
  return static_cast<int8_t>(b & 0xFFu);
}
// ggml's kvalues_iq4nl {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}.
__device__ __forceinline__ int iq4_level(uint32_t q) { return lookup16(0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u, q); }
// FP4 E2M1 values doubled {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12} (ggml's table).
__device__ __forceinline__ int e2m1_doubled(uint32_t q) { return lookup16(0x03020100u, 0x0C080604u, 0xFDFEFF00u, 0xF4F8FAFCu, q); }

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float fl(int v) { return static_cast<float>(v); }

// Unit u (0 … size/32 − 1) of the block at b: its 32 values in v.
template <uint32_t T>
__device__ __forceinline__ void decode_unit(const uint8_t* b, int u, float (&v)[32]);

template <>
__device__ __forceinline__ void decode_unit<q4_0>(const uint8_t* b, int, float (&v)[32]) {
  const auto s = load_bytes<18>(b);
  const float d = s.f16(0);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int q = static_cast<int>(s.byte(2 + j));
    v[j] = mul(fl((q & 0xF) - 8), d), v[j + 16] = mul(fl((q >> 4) - 8), d);
  }
}

template <>
__device__ __forceinline__ void decode_unit<q4_1>(const uint8_t* b, int, float (&v)[32]) {
  const auto s = load_bytes<20>(b);
  const float d = s.f16(0), m = s.f16(2);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int q = static_cast<int>(s.byte(4 + j));
    v[j] = __fadd_rn(mul(fl(q & 0xF), d), m), v[j + 16] = __fadd_rn(mul(fl(q >> 4), d), m);
  }
}

template <>
__device__ __forceinline__ void decode_unit<q5_0>(const uint8_t* b, int, float (&v)[32]) {
  const auto s = load_bytes<22>(b);
  const float d = s.f16(0);
  const uint32_t qh = s.u32(2);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int q = static_cast<int>(s.byte(6 + j));
    const int h0 = ((qh >> j) & 1) << 4, h1 = ((qh >> (j + 16)) & 1) << 4;
    v[j] = mul(fl(((q & 0xF) | h0) - 16), d), v[j + 16] = mul(fl(((q >> 4) | h1) - 16), d);
  }
}

template <>
__device__ __forceinline__ void decode_unit<q5_1>(const uint8_t* b, int, float (&v)[32]) {
  const auto s = load_bytes<24>(b);
  const float d = s.f16(0), m = s.f16(2);
  const uint32_t qh = s.u32(4);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int q = static_cast<int>(s.byte(8 + j));
    const int h0 = ((qh >> j) & 1) << 4, h1 = ((qh >> (j + 16)) & 1) << 4;
    v[j] = __fadd_rn(mul(fl((q & 0xF) | h0), d), m), v[j + 16] = __fadd_rn(mul(fl((q >> 4) | h1), d), m);
  }
}

template <>
__device__ __forceinline__ void decode_unit<q8_0>(const uint8_t* b, int, float (&v)[32]) {
  const auto s = load_bytes<34>(b);
  const float d = s.f16(0);
#pragma unroll
  for (int j = 0; j < 32; ++j) v[j] = mul(fl(static_cast<int8_t>(s.byte(2 + j))), d);
}

// Scale and min of sub-block j of a Q4_K / Q5_K block from its 12 scale bytes (ref's scale_min_k4).
__device__ __forceinline__ void scale_min_k4(int j, uint32_t s0, uint32_t s1, uint32_t s2, int& sc, int& m) {
  if (j < 4) {
    sc = static_cast<int>(byte_of(s0, s1, s2, j) & 63), m = static_cast<int>(byte_of(s0, s1, s2, j + 4) & 63);
  } else {
    sc = static_cast<int>((byte_of(s0, s1, s2, j + 4) & 0xF) | ((byte_of(s0, s1, s2, j - 4) >> 6) << 4));
    m = static_cast<int>((byte_of(s0, s1, s2, j + 4) >> 4) | ((byte_of(s0, s1, s2, j) >> 6) << 4));
  }
}

template <>
__device__ __forceinline__ void decode_unit<q4_k>(const uint8_t* b, int u, float (&v)[32]) {
  const auto h = load_bytes<16>(b);
  const auto q = load_bytes<32>(b + 16 + 32 * (u >> 1));
  int sc, m;
  scale_min_k4(u, h.w[1], h.w[2], h.w[3], sc, m);
  const float d = mul(h.f16(0), fl(sc)), mn = mul(h.f16(2), fl(m));
  const int shift = (u & 1) * 4;
#pragma unroll
  for (int l = 0; l < 32; ++l) v[l] = __fsub_rn(mul(d, fl(static_cast<int>((q.byte(l) >> shift) & 0xF))), mn);
}

template <>
__device__ __forceinline__ void decode_unit<q5_k>(const uint8_t* b, int u, float (&v)[32]) {
  const auto h = load_bytes<16>(b);
  const auto qh = load_bytes<32>(b + 16);
  const auto q = load_bytes<32>(b + 48 + 32 * (u >> 1));
  int sc, m;
  scale_min_k4(u, h.w[1], h.w[2], h.w[3], sc, m);
  const float d = mul(h.f16(0), fl(sc)), mn = mul(h.f16(2), fl(m));
  const int shift = (u & 1) * 4;
#pragma unroll
  for (int l = 0; l < 32; ++l) {
    const int code = static_cast<int>(((q.byte(l) >> shift) & 0xF) + (((qh.byte(l) >> u) & 1) << 4));
    v[l] = __fsub_rn(mul(d, fl(code)), mn);
  }
}

template <>
__device__ __forceinline__ void decode_unit<q6_k>(const uint8_t* b, int u, float (&v)[32]) {
  const int half = u >> 2, i = u & 3;  // values 32i … 32i + 31 of the half
  const auto ql = load_bytes<32>(b + 64 * half + 32 * (i & 1));
  const auto qh = load_bytes<32>(b + 128 + 32 * half);
  const auto sc = load_bytes<2>(b + 192 + 8 * half + 2 * i);
  const float d = load_bytes<2>(b + 208).f16(0);
  const float d0 = mul(d, fl(static_cast<int8_t>(sc.byte(0)))), d1 = mul(d, fl(static_cast<int8_t>(sc.byte(1))));
  const int lo_shift = (i >> 1) * 4, hi_shift = 2 * i;
#pragma unroll
  for (int l = 0; l < 32; ++l) {
    const int q = static_cast<int>(((ql.byte(l) >> lo_shift) & 0xF) | (((qh.byte(l) >> hi_shift) & 3) << 4)) - 32;
    v[l] = mul(l < 16 ? d0 : d1, fl(q));
  }
}

template <>
__device__ __forceinline__ void decode_unit<q2_k>(const uint8_t* b, int u, float (&v)[32]) {
  const int n = u >> 2, shift = 2 * (u & 3), is = 8 * n + 2 * (u & 3);
  const auto sc = load_bytes<2>(b + is);
  const auto q = load_bytes<32>(b + 16 + 32 * n);
  const auto dd = load_bytes<4>(b + 80);
  const float d = dd.f16(0), dmin = dd.f16(2);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const uint32_t s = sc.byte(half);
    const float dl = mul(d, fl(static_cast<int>(s & 0xF))), ml = mul(dmin, fl(static_cast<int>(s >> 4)));
#pragma unroll
    for (int l = 0; l < 16; ++l)
      v[16 * half + l] = __fsub_rn(mul(dl, fl(static_cast<int>((q.byte(16 * half + l) >> shift) & 3))), ml);
  }
}

template <>
__device__ __forceinline__ void decode_unit<q3_k>(const uint8_t* b, int u, float (&v)[32]) {
  const int n = u >> 2, s = u & 3, shift = 2 * s;
  const auto hm = load_bytes<32>(b);
  const auto q = load_bytes<32>(b + 32 + 32 * n);
  const auto sb = load_bytes<12>(b + 96);
  const float d_all = load_bytes<2>(b + 108).f16(0);
  const int mbit = 4 * n + s;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = 8 * n + 2 * s + half;  // scale index
    const uint32_t low = i < 8 ? byte_of(sb.w[0], sb.w[1], sb.w[2], i) : byte_of(sb.w[0], sb.w[1], sb.w[2], i - 8) >> 4;
    const int scale = static_cast<int>((low & 0xF) | (((byte_of(sb.w[0], sb.w[1], sb.w[2], 8 + (i & 3)) >> (2 * (i >> 2))) & 3) << 4));
    const float dl = mul(d_all, fl(scale - 32));
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      const int k = 16 * half + l;
      const int code = static_cast<int>((q.byte(k) >> shift) & 3) - (((hm.byte(k) >> mbit) & 1) ? 0 : 4);
      v[k] = mul(dl, fl(code));
    }
  }
}

template <>
__device__ __forceinline__ void decode_unit<iq4_nl>(const uint8_t* b, int, float (&v)[32]) {
  const auto s = load_bytes<18>(b);
  const float d = s.f16(0);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const uint32_t q = s.byte(2 + j);
    v[j] = mul(d, fl(iq4_level(q & 0xF))), v[j + 16] = mul(d, fl(iq4_level(q >> 4)));
  }
}

template <>
__device__ __forceinline__ void decode_unit<iq4_xs>(const uint8_t* b, int u, float (&v)[32]) {
  const auto h = load_bytes<8>(b);
  const auto q = load_bytes<16>(b + 8 + 16 * u);
  const float d = h.f16(0);
  const uint32_t scales_h = h.u16(2), scales_l = h.w[1];
  const int ls = static_cast<int>(((scales_l >> (8 * (u >> 1) + 4 * (u & 1))) & 0xF) | (((scales_h >> (2 * u)) & 3) << 4));
  const float dl = mul(d, fl(ls - 32));
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const uint32_t c = q.byte(j);
    v[j] = mul(dl, fl(iq4_level(c & 0xF))), v[j + 16] = mul(dl, fl(iq4_level(c >> 4)));
  }
}

template <>
__device__ __forceinline__ void decode_unit<mxfp4>(const uint8_t* b, int, float (&v)[32]) {
  const auto s = load_bytes<17>(b);
  const uint32_t e = s.byte(0);
  const float d = __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const uint32_t q = s.byte(1 + j);
    v[j] = mul(fl(e2m1_doubled(q & 0xF)), d), v[j + 16] = mul(fl(e2m1_doubled(q >> 4)), d);
  }
}

template <>
__device__ __forceinline__ void decode_unit<f8_e4m3_32>(const uint8_t* b, int, float (&v)[32]) {
  const auto s = load_bytes<36>(b);
  const float d = s.f32(0);
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const __half h(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(s.byte(4 + j)), __NV_E4M3));
    v[j] = mul(__half2float(h), d);
  }
}

template <>
__device__ __forceinline__ void decode_unit<fp4_e2m1_32>(const uint8_t* b, int, float (&v)[32]) {
  const auto s = load_bytes<24>(b);
  const float d0 = s.f32(0), d1 = s.f32(4);
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const uint32_t q = (s.byte(8 + j / 2) >> (4 * (j & 1))) & 0xF;
    v[j] = mul(mul(fl(e2m1_doubled(q)), 0.5f), j < 16 ? d0 : d1);  // halving is exact
  }
}

// Calls f(std::integral_constant<uint32_t, T>{}) for the run-time type number T; false for a type without
// a decoder.
template <typename F>
__host__ bool with_type(uint32_t type, F&& f) {
  switch (type) {
    case q4_0: f(std::integral_constant<uint32_t, q4_0>{}); return true;
    case q4_1: f(std::integral_constant<uint32_t, q4_1>{}); return true;
    case q5_0: f(std::integral_constant<uint32_t, q5_0>{}); return true;
    case q5_1: f(std::integral_constant<uint32_t, q5_1>{}); return true;
    case q8_0: f(std::integral_constant<uint32_t, q8_0>{}); return true;
    case q2_k: f(std::integral_constant<uint32_t, q2_k>{}); return true;
    case q3_k: f(std::integral_constant<uint32_t, q3_k>{}); return true;
    case q4_k: f(std::integral_constant<uint32_t, q4_k>{}); return true;
    case q5_k: f(std::integral_constant<uint32_t, q5_k>{}); return true;
    case q6_k: f(std::integral_constant<uint32_t, q6_k>{}); return true;
    case iq4_nl: f(std::integral_constant<uint32_t, iq4_nl>{}); return true;
    case iq4_xs: f(std::integral_constant<uint32_t, iq4_xs>{}); return true;
    case mxfp4: f(std::integral_constant<uint32_t, mxfp4>{}); return true;
    case f8_e4m3_32: f(std::integral_constant<uint32_t, f8_e4m3_32>{}); return true;
    case fp4_e2m1_32: f(std::integral_constant<uint32_t, fp4_e2m1_32>{}); return true;
    default: return false;
  }
}

}  // namespace kapitsa::ops::cuda::kernels::ggml
