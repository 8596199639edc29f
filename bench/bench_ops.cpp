// Op micro-benchmarks (Google Benchmark) for the cpu backend. Matmul reports weight bytes/s
// (SetBytesProcessed counts the weight matrix once per call), to compare with memory bandwidth:
// decode GEMV (T = 1) should approach it. Also attention and conv1d at model-like shapes.
#include "base/thread_pool.h"
#include "ops/cpu/cpu.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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
    ops::cpu::matmul(x, w, y);
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
    ops::cpu::attention(q, k, v, past, 1.0f / std::sqrt(float(D)), o);
    benchmark::DoNotOptimize(o.f32()[0]);
  }
  state.SetBytesProcessed(state.iterations() * 2 * S * Hkv * D * 4);
}
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
    ops::cpu::attention_paged(q, k, v, table, S, past, 1.0f / std::sqrt(float(D)), o);
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
    ops::cpu::conv1d_causal(x, w, Tensor(), win, true, y);
    benchmark::DoNotOptimize(y.f32()[0]);
  }
  state.SetBytesProcessed(state.iterations() * 2 * T * C * 4);
}
BENCHMARK(BM_Conv1d)->ArgNames({"T", "C"})->Args({1, 6144})->Args({512, 6144})->UseRealTime()->Unit(benchmark::kMicrosecond);

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
