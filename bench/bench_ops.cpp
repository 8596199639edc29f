// Op micro-benchmarks (Google Benchmark) for the cpu backend. Matmul reports weight bytes/s
// (SetBytesProcessed counts the weight matrix once per call), to compare with memory bandwidth:
// decode GEMV (T = 1) should approach it. Also attention and conv1d at model-like shapes, and one
// batched (varlen) call against a per-sequence loop for 16 decode sequences.
#include "base/thread_pool.h"
#include "ops/cpu/cpu.h"
#include "ops/backend.h"
#include "ops/ops.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace {
using namespace kapitsa;

Buffer random_buffer(DType dt, Shape s, uint64_t seed) {
  Buffer b = Buffer::allocate(dt, s);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> d(-1, 1);
  for (int64_t i = 0; i < s.numel(); ++i) {
    const float v = d(rng);
    if (dt == DType::f32) b.tensor().data_as<float>()[i] = v;
    else if (dt == DType::bf16) b.tensor().data_as<uint16_t>()[i] = f32_to_bf16(v);
    else b.tensor().data_as<uint16_t>()[i] = f32_to_f16(v);
  }
  return b;
}

// args: T, N, K, dtype (0 f32, 1 bf16, 2 f16)
void BM_Matmul(benchmark::State& state) {
  const int64_t T = state.range(0), N = state.range(1), K = state.range(2);
  const DType dt = state.range(3) == 0 ? DType::f32 : state.range(3) == 1 ? DType::bf16 : DType::f16;
  Buffer x = random_buffer(DType::f32, {T, K}, 1), w = random_buffer(dt, {N, K}, 2);
  Buffer y = Buffer::allocate(DType::f32, {T, N});
  default_thread_pool();  // start the workers outside the timing
  for (auto _ : state) {
    ops::cpu::backend()->matmul(x, Linear(w), y);
    benchmark::DoNotOptimize(y.f32()[0]);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.tensor().nbytes()));
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * T * N * K * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(dtype_name(dt)));
}
BENCHMARK(BM_Matmul)
    ->ArgNames({"T", "N", "K", "dt"})
    ->Args({1, 1024, 1024, 1})
    ->Args({1, 4096, 1024, 1})
    ->Args({1, 1024, 4096, 1})
    ->Args({1, 248320, 1024, 1})
    ->Args({1, 4096, 1024, 2})
    ->Args({1, 4096, 1024, 0})
    ->Args({64, 1024, 1024, 1})
    ->Args({64, 4096, 1024, 1})
    ->Args({64, 248320, 1024, 1})
    ->Args({512, 4096, 1024, 1})
    ->Args({512, 9216, 2560, 1})  // Qwen3.5-4B MLP up, down
    ->Args({512, 2560, 9216, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// MLX affine weights (group 64, bf16 scales and biases), same shapes as BM_Matmul's bf16 rows: the
// dequantize-and-dot kernel. Bytes processed: codes + scales + biases (Linear::nbytes).
// args: T, N, K, bits
void BM_MatmulAffine(benchmark::State& state) {
  const int64_t T = state.range(0), N = state.range(1), K = state.range(2);
  const int bits = static_cast<int>(state.range(3)), gs = 64;
  Buffer x = random_buffer(DType::f32, {T, K}, 1);
  Buffer codes = Buffer::allocate(DType::u32, {N, K * bits / 32});
  std::mt19937 rng(3);
  for (int64_t i = 0; i < codes.tensor().numel(); ++i) codes.tensor().data_as<uint32_t>()[i] = rng();
  Buffer scales = random_buffer(DType::bf16, {N, K / gs}, 4), biases = random_buffer(DType::bf16, {N, K / gs}, 5);
  const Linear w = Linear::affine(codes, scales, biases, bits, gs);
  Buffer y = Buffer::allocate(DType::f32, {T, N});
  default_thread_pool();
  for (auto _ : state) {
    ops::cpu::backend()->matmul(x, w, y);
    benchmark::DoNotOptimize(y.f32()[0]);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.nbytes()));
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * T * N * K * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::to_string(bits) + "-bit");
}
BENCHMARK(BM_MatmulAffine)
    ->ArgNames({"T", "N", "K", "bits"})
    ->Args({1, 4096, 1024, 4})
    ->Args({1, 4096, 1024, 8})
    ->Args({1, 4096, 1024, 3})
    ->Args({1, 4096, 1024, 6})
    ->Args({1, 1024, 4096, 4})
    ->Args({1, 248320, 1024, 4})
    // A head streamed from DRAM at the row counts of speculative verification (the plane kernel's 2-8 tokens).
    ->Args({2, 248320, 1024, 4})
    ->Args({3, 248320, 1024, 4})
    ->Args({4, 248320, 1024, 4})
    ->Args({5, 248320, 1024, 4})
    ->Args({8, 248320, 1024, 4})
    ->Args({64, 4096, 1024, 4})
    ->Args({512, 4096, 1024, 4})
    // The demo target's MLP gate (hidden 384 → 1152) at the row counts of speculative verification.
    ->Args({1, 1152, 384, 4})
    ->Args({2, 1152, 384, 4})
    ->Args({4, 1152, 384, 4})
    ->Args({8, 1152, 384, 4})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// args: T (new queries), past keys, Hq, Hkv, D
void BM_Attention(benchmark::State& state) {
  const int64_t T = state.range(0), past = state.range(1), Hq = state.range(2), Hkv = state.range(3),
                D = state.range(4);
  const int64_t S = past + T;
  Buffer q = random_buffer(DType::f32, {T, Hq, D}, 1), k = random_buffer(DType::f32, {S, Hkv, D}, 2);
  Buffer v = random_buffer(DType::f32, {S, Hkv, D}, 3), o = Buffer::allocate(DType::f32, {T, Hq, D});
  default_thread_pool();
  for (auto _ : state) {
    ops::cpu::backend()->attention(q, k, v, past, 1.0f / std::sqrt(float(D)), o);
    benchmark::DoNotOptimize(o.f32()[0]);
  }
  state.SetBytesProcessed(state.iterations() * 2 * S * Hkv * D * 4);
}
// llama.cpp block weights (GGUF): random codes, every f16 scale field (MXFP4: its E8M0 byte) 2^-10. Bytes processed: the
// blocks (what a decode step reads). Q8_0 / Q4_K / Q6_K take the int8-activation kernel, other types
// the packed GEMM (rows decoded to f32 panels) from 16 tokens on.
// Shapes: Qwen3.5-4B's MLP (2560 → 9728 → 2560), 0.8B's (1024 → 3584 → 1024) and its tied head
// (248320 × 1024, 270 MB at Q8_0: no cache holds it).
// args: T, N, K, type (8 Q8_0, 12 Q4_K, 14 Q6_K; 1000 F8_E4M3_32, 1001 FP4_E2M1_32), packed (1: the
// packed GEMM, for comparison)
void BM_MatmulGgml(benchmark::State& state) {
  const int64_t T = state.range(0), N = state.range(1), K = state.range(2);
  const auto type = static_cast<GgmlType>(state.range(3));
  const auto info = *ggml_type_info(static_cast<uint32_t>(type));
  const int64_t row_bytes = K / info.block_size * info.block_bytes;
  Buffer x = random_buffer(DType::f32, {T, K}, 1);
  Buffer blocks = Buffer::allocate(DType::u8, {N, row_bytes});
  uint8_t* b = blocks.tensor().data_as<uint8_t>();
  std::mt19937 rng(3);
  for (int64_t i = 0; i < N * row_bytes; ++i) b[i] = static_cast<uint8_t>(rng());
  const uint16_t scale = f32_to_f16(1.0f / 1024);
  const float scale32 = 1.0f / 1024;  // Kapitsa's FP8 / FP4 blocks: f32 scales first
  for (int64_t at = 0; at < N * row_bytes && ggml_type_internal(type); at += info.block_bytes)
    for (int64_t h = 0; h < (type == GgmlType::fp4_e2m1_32 ? 8 : 4); h += 4) std::memcpy(b + at + h, &scale32, 4);
  for (int64_t at = 0; at < N * row_bytes && !ggml_type_internal(type); at += info.block_bytes) {
    if (type == GgmlType::mxfp4) {  // one E8M0 byte: 2^-10 (random ones are mostly subnormal or huge)
      b[at] = 127 - 10;
      continue;
    }
    for (int64_t h : type == GgmlType::q6_k ? std::vector<int64_t>{208} : type == GgmlType::q8_0 ? std::vector<int64_t>{0} : std::vector<int64_t>{0, 2})
      std::memcpy(b + at + h, &scale, 2);
  }
  const Linear w = Linear::ggml(blocks, type, K);
  Buffer y = Buffer::allocate(DType::f32, {T, N});
  default_thread_pool();
  for (auto _ : state) {
    if (state.range(4)) KAPITSA_CPU_AT(ops::cpu::selected_level(), matmul_ggml_packed)(x, w, y);
    else ops::cpu::backend()->matmul(x, w, y);
    benchmark::DoNotOptimize(y.f32()[0]);
  }
  state.SetBytesProcessed(state.iterations() * N * row_bytes);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * T * N * K * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(info.name));
}
BENCHMARK(BM_MatmulGgml)
    ->ArgNames({"T", "N", "K", "type", "packed"})
    ->Args({1, 4096, 1024, 1000, 0})  // Kapitsa's F8_E4M3_32 (FP8 checkpoints), beside BM_Matmul's bf16 row
    ->Args({1, 4096, 1024, 1001, 0})  // FP4_E2M1_32 (NVFP4)
    ->Args({1, 248320, 1024, 1000, 0})  // memory-bound, beside BM_Matmul's bf16 head
    ->Args({1, 248320, 1024, 1001, 0})
    ->Args({512, 4096, 1024, 1000, 0})
    ->Args({1, 9728, 2560, 8, 0})
    ->Args({1, 2560, 9728, 8, 0})
    ->Args({1, 9728, 2560, 12, 0})
    ->Args({1, 2560, 9728, 12, 0})
    ->Args({1, 9728, 2560, 14, 0})
    ->Args({1, 2560, 9728, 14, 0})
    ->Args({1, 3584, 1024, 8, 0})
    ->Args({1, 3584, 1024, 12, 0})
    ->Args({1, 3584, 1024, 13, 0})  // the other types of common GGUF mixes (Q5_K_M, unsloth's): Q5_K,
    ->Args({1, 3584, 1024, 2, 0})   // Q4_0, Q5_0, IQ4_XS, IQ4_NL, Q3_K, Q2_K, MXFP4
    ->Args({1, 3584, 1024, 6, 0})
    ->Args({1, 3584, 1024, 23, 0})
    ->Args({1, 3584, 1024, 20, 0})
    ->Args({1, 3584, 1024, 11, 0})
    ->Args({1, 3584, 1024, 10, 0})
    ->Args({1, 3584, 1024, 39, 0})
    ->Args({1, 248320, 1024, 8, 0})
    ->Args({1, 248320, 1024, 12, 0})
    ->Args({2, 248320, 1024, 12, 0})  // verification rows on a head from DRAM, beside BM_MatmulAffine's
    ->Args({5, 248320, 1024, 12, 0})
    ->Args({4, 9728, 2560, 8, 0})
    ->Args({4, 9728, 2560, 12, 0})
    ->Args({8, 3584, 1024, 8, 0})
    ->Args({16, 3584, 1024, 8, 0})
    ->Args({512, 3584, 1024, 8, 0})
    ->Args({512, 3584, 1024, 8, 1})
    ->Args({512, 3584, 1024, 12, 0})
    ->Args({512, 3584, 1024, 12, 1})
    ->Args({512, 3584, 1024, 13, 0})
    ->Args({512, 3584, 1024, 13, 1})
    ->Args({512, 3584, 1024, 2, 0})
    ->Args({512, 3584, 1024, 2, 1})
    ->Args({512, 3584, 1024, 23, 0})
    ->Args({512, 3584, 1024, 23, 1})
    ->Args({512, 3584, 1024, 39, 0})
    ->Args({512, 3584, 1024, 39, 1})
    ->Args({512, 3584, 1024, 11, 0})  // Q3_K and Q6_K prefill (the 16-row panels, matmul_ggml_panel.cpp)
    ->Args({512, 3584, 1024, 14, 0})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_Attention)
    ->ArgNames({"T", "past", "Hq", "Hkv", "D"})
    ->Args({1, 1024, 8, 2, 256})
    ->Args({1, 8192, 8, 2, 256})
    ->Args({512, 0, 8, 2, 256})
    ->Args({2048, 0, 8, 2, 256})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// The same through a block table of shuffled pages of P tokens. args: T, past, Hq, Hkv, D, P
void BM_AttentionPaged(benchmark::State& state) {
  const int64_t T = state.range(0), past = state.range(1), Hq = state.range(2), Hkv = state.range(3),
                D = state.range(4), P = state.range(5);
  const int64_t S = past + T, n_pages = (S + P - 1) / P;
  Buffer q = random_buffer(DType::f32, {T, Hq, D}, 1), k = random_buffer(DType::f32, {n_pages, P, Hkv, D}, 2);
  Buffer v = random_buffer(DType::f32, {n_pages, P, Hkv, D}, 3), o = Buffer::allocate(DType::f32, {T, Hq, D});
  std::vector<int32_t> table(static_cast<size_t>(n_pages));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(1));
  default_thread_pool();
  for (auto _ : state) {
    ops::cpu::backend()->attention_paged(q, k, v, table, S, past, 1.0f / std::sqrt(float(D)), o);
    benchmark::DoNotOptimize(o.f32()[0]);
  }
  state.SetBytesProcessed(state.iterations() * 2 * S * Hkv * D * 4);
}
BENCHMARK(BM_AttentionPaged)
    ->ArgNames({"T", "past", "Hq", "Hkv", "D", "P"})
    ->Args({1, 1024, 8, 2, 256, 16})
    ->Args({1, 8192, 8, 2, 256, 16})
    ->Args({1, 8192, 8, 2, 256, 32})
    ->Args({1, 8192, 8, 2, 256, 64})
    ->Args({512, 0, 8, 2, 256, 16})
    ->Args({2048, 0, 8, 2, 256, 16})
    ->Args({2048, 0, 8, 2, 256, 64})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// args: T, C
void BM_Conv1d(benchmark::State& state) {
  const int64_t T = state.range(0), C = state.range(1), K = 4;
  Buffer x = random_buffer(DType::f32, {T, C}, 1), w = random_buffer(DType::f32, {C, K}, 2);
  Buffer win = random_buffer(DType::f32, {K - 1, C}, 3), y = Buffer::allocate(DType::f32, {T, C});
  default_thread_pool();
  for (auto _ : state) {
    ops::cpu::backend()->conv1d_causal(x, w, Tensor(), win, true, y);
    benchmark::DoNotOptimize(y.f32()[0]);
  }
  state.SetBytesProcessed(state.iterations() * 2 * T * C * 4);
}
BENCHMARK(BM_Conv1d)->ArgNames({"T", "C"})->Args({1, 6144})->Args({512, 6144})->UseRealTime()->Unit(benchmark::kMicrosecond);

// ---- one varlen call vs a per-sequence loop, 16 decode sequences (one token each) ----------------
// The shapes of Qwen3.5-0.8B's Gated DeltaNet (16 heads of 128 × 128), Nemotron-3-Nano's Mamba-2 (64
// heads × 64 × 128 state, 8 groups) and Qwen3.5's attention (8/2 heads of 256, 1024 past keys per
// sequence). range(0) = 1: one *_varlen call for all sequences; 0: one single-sequence call each.
// Both go through ops.h (argument checks included) on the cpu backend.
constexpr int64_t kSeqs = 16;

std::vector<int64_t> decode_offsets() {
  std::vector<int64_t> o(kSeqs + 1);
  std::iota(o.begin(), o.end(), 0);
  return o;
}
std::vector<int32_t> identity_slots() {
  std::vector<int32_t> s(kSeqs);
  std::iota(s.begin(), s.end(), 0);
  return s;
}

void BM_GdnDecode16(benchmark::State& state) {
  const int64_t Hk = 16, Hv = 16, D = 128;
  Buffer q = random_buffer(DType::f32, {kSeqs, Hk, D}, 1), k = random_buffer(DType::f32, {kSeqs, Hk, D}, 2);
  Buffer v = random_buffer(DType::f32, {kSeqs, Hv, D}, 3), g = random_buffer(DType::f32, {kSeqs, Hv}, 4);
  Buffer beta = random_buffer(DType::f32, {kSeqs, Hv}, 5), o = Buffer::allocate(DType::f32, {kSeqs, Hv, D});
  for (int64_t i = 0; i < kSeqs * Hv; ++i) g.f32()[i] = -0.1f, beta.f32()[i] = 0.5f;
  Buffer states = random_buffer(DType::f32, {kSeqs, Hv, D, D}, 6);
  const std::vector<int64_t> offsets = decode_offsets();
  const std::vector<int32_t> slots = identity_slots();
  const ops::SeqBatch batch{offsets, slots};
  ops::ScopedBackend cpu(ops::find_backend("cpu"));
  default_thread_pool();
  for (auto _ : state) {
    if (state.range(0) == 1) {
      ops::gated_delta_rule_varlen(q, k, v, g, beta, states, batch, o);
    } else {
      for (int64_t i = 0; i < kSeqs; ++i)
        ops::gated_delta_rule_recurrent(q.tensor().rows(i, i + 1), k.tensor().rows(i, i + 1), v.tensor().rows(i, i + 1),
                                        g.tensor().rows(i, i + 1), beta.tensor().rows(i, i + 1),
                                        states.tensor().index(i), o.tensor().rows(i, i + 1));
    }
    benchmark::DoNotOptimize(o.f32()[0]);
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(states.tensor().nbytes()));
}
BENCHMARK(BM_GdnDecode16)->ArgNames({"varlen"})->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_SsdDecode16(benchmark::State& state) {
  const int64_t H = 64, P = 64, G = 8, N = 128;
  Buffer x = random_buffer(DType::f32, {kSeqs, H, P}, 1), dt = random_buffer(DType::f32, {kSeqs, H}, 2);
  Buffer B = random_buffer(DType::f32, {kSeqs, G, N}, 3), C = random_buffer(DType::f32, {kSeqs, G, N}, 4);
  Buffer A_log = random_buffer(DType::f32, {H}, 5), D = random_buffer(DType::f32, {H}, 6);
  Buffer dt_bias = random_buffer(DType::f32, {H}, 7), y = Buffer::allocate(DType::f32, {kSeqs, H, P});
  Buffer states = random_buffer(DType::f32, {kSeqs, H, P, N}, 8);
  const std::vector<int64_t> offsets = decode_offsets();
  const std::vector<int32_t> slots = identity_slots();
  const ops::SeqBatch batch{offsets, slots};
  const float inf = std::numeric_limits<float>::infinity();
  ops::ScopedBackend cpu(ops::find_backend("cpu"));
  // The varlen op reads x | B | C as one array's columns (the conv output's).
  Buffer xbc = Buffer::allocate(DType::f32, {kSeqs, H * P + 2 * G * N});
  const Tensor columns[] = {x.tensor().reshape({kSeqs, H * P}), B.tensor().reshape({kSeqs, G * N}),
                            C.tensor().reshape({kSeqs, G * N})};
  ops::concat_columns(columns, xbc);
  default_thread_pool();
  for (auto _ : state) {
    if (state.range(0) == 1) {
      ops::ssd_scan_varlen(xbc, G, dt, A_log, D, dt_bias, 0.0f, inf, 256, states, batch, y);
    } else {
      for (int64_t i = 0; i < kSeqs; ++i)
        ops::ssd_scan_recurrent(x.tensor().rows(i, i + 1), dt.tensor().rows(i, i + 1), B.tensor().rows(i, i + 1),
                                C.tensor().rows(i, i + 1), A_log, D, dt_bias, 0.0f, inf, states.tensor().index(i),
                                y.tensor().rows(i, i + 1));
    }
    benchmark::DoNotOptimize(y.f32()[0]);
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(states.tensor().nbytes()));
}
BENCHMARK(BM_SsdDecode16)->ArgNames({"varlen"})->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_AttentionDecode16(benchmark::State& state) {
  const int64_t Hq = 8, Hkv = 2, D = 256, P = 16, past = 1024, pages_per_seq = (past + 1 + P - 1) / P;
  Buffer q = random_buffer(DType::f32, {kSeqs, Hq, D}, 1), o = Buffer::allocate(DType::f32, {kSeqs, Hq, D});
  Buffer k = random_buffer(DType::f32, {kSeqs * pages_per_seq, P, Hkv, D}, 2);
  Buffer v = random_buffer(DType::f32, {kSeqs * pages_per_seq, P, Hkv, D}, 3);
  std::vector<int32_t> tables(static_cast<size_t>(kSeqs * pages_per_seq)), block_offsets;
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), std::mt19937(1));
  for (int64_t i = 0; i <= kSeqs; ++i) block_offsets.push_back(static_cast<int32_t>(i * pages_per_seq));
  const std::vector<int64_t> offsets = decode_offsets(), positions(kSeqs, past);
  ops::SeqBatch batch{offsets};
  batch.positions0 = positions;
  batch.block_offsets = block_offsets;
  batch.block_tables = tables;
  const float scale = 1.0f / std::sqrt(float(D));
  ops::ScopedBackend cpu(ops::find_backend("cpu"));
  default_thread_pool();
  for (auto _ : state) {
    if (state.range(0) == 1) {
      ops::attention_paged_varlen(q, k, v, batch, scale, o);
    } else {
      for (int64_t i = 0; i < kSeqs; ++i)
        ops::attention_paged(q.tensor().rows(i, i + 1), k, v, batch.block_table(i), past + 1, past, scale,
                             o.tensor().rows(i, i + 1));
    }
    benchmark::DoNotOptimize(o.f32()[0]);
  }
  state.SetBytesProcessed(state.iterations() * 2 * kSeqs * (past + 1) * Hkv * D * 4);
}
BENCHMARK(BM_AttentionDecode16)->ArgNames({"varlen"})->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The roofline for GEMV: read bandwidth of this machine, all threads summing a 512 MiB buffer
// (the same access pattern as the weights of a decode step, split the same way).
void BM_MemoryRead(benchmark::State& state) {
  const size_t n = size_t{512} << 20 >> 2;
  std::vector<float> buf(n, 1.0f);
  std::vector<double> partial(default_thread_pool().size() * 64);
  for (auto _ : state) {
    parallel_for(n / 4096, 16, [&](size_t b, size_t e) {
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (size_t i = b * 4096; i < e * 4096; i += 4) {
        s0 += buf[i], s1 += buf[i + 1], s2 += buf[i + 2], s3 += buf[i + 3];
      }
      benchmark::DoNotOptimize(s0 + s1 + s2 + s3);
    });
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n * 4));
}
BENCHMARK(BM_MemoryRead)->UseRealTime()->Unit(benchmark::kMillisecond);

// The fixed cost of one parallel_for over all threads (every op pays it; decode runs ~1000 per token).
void BM_ParallelForOverhead(benchmark::State& state) {
  const size_t n = default_thread_pool().size() * 4;
  std::vector<float> sink(n);
  for (auto _ : state) {
    parallel_for(n, 1, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) sink[i] += 1.0f;
    });
  }
  benchmark::DoNotOptimize(sink.data());
}
BENCHMARK(BM_ParallelForOverhead)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
