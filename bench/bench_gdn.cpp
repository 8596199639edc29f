// Google Benchmark of the CPU Gated DeltaNet ops at Qwen3.5-0.8B-like sizes (Hk = Hv = 16, Dk = Dv = 128):
// the recurrent form at T = 1 (decode; reports state bytes moved per second next to the memory roofline
// of one read + one write of the f32 state) and both forms at T = 512 (prefill; tokens/s, GFLOP/s).
// Timings only; correctness is tests/ops/test_gated_delta_rule.cpp's job.
#include "ops/backend.h"
#include "ops/cpu/cpu.h"

#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

namespace {

using kapitsa::Buffer;
using kapitsa::DType;

struct Inputs {
  Buffer q, k, v, g, beta, state, o;  // state unused by run() (it keeps its own)
};

Inputs make(int64_t T, int64_t Hk, int64_t Hv, int64_t D) {
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  Inputs in{Buffer::allocate(DType::f32, {T, Hk, D}), Buffer::allocate(DType::f32, {T, Hk, D}),
            Buffer::allocate(DType::f32, {T, Hv, D}), Buffer::allocate(DType::f32, {T, Hv}),
            Buffer::allocate(DType::f32, {T, Hv}), Buffer::zeros(DType::f32, {Hv, D, D}),
            Buffer::allocate(DType::f32, {T, Hv, D})};
  for (Buffer* b : {&in.q, &in.k}) {  // L2-normalised rows; q also scaled by D^-0.5
    float* p = b->f32();
    for (int64_t r = 0; r < T * Hk; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < D; ++i) ss += double(p[r * D + i] = nd(rng)) * p[r * D + i];
      const double s = (b == &in.q ? 1.0 / std::sqrt(double(D)) : 1.0) / std::sqrt(ss);
      for (int64_t i = 0; i < D; ++i) p[r * D + i] = float(p[r * D + i] * s);
    }
  }
  for (int64_t i = 0; i < T * Hv * D; ++i) in.v.f32()[i] = nd(rng);
  for (int64_t i = 0; i < T * Hv; ++i) {
    in.g.f32()[i] = -2.0f * u01(rng);
    in.beta.f32()[i] = u01(rng);
  }
  return in;
}

using GdnFn = void (*)(const kapitsa::Tensor&, const kapitsa::Tensor&, const kapitsa::Tensor&,
                       const kapitsa::Tensor&, const kapitsa::Tensor&, const kapitsa::Tensor&, const kapitsa::Tensor&);

// n_states > 1 cycles through that many separate states (one per GDN layer, as a decode step does), so
// that with 48 of them (48 MiB) the state comes from DRAM rather than from cache.
void run(benchmark::State& st, GdnFn fn, int64_t T, int n_states = 1) {
  const int64_t Hk = 16, Hv = 16, D = 128;
  Inputs in = make(T, Hk, Hv, D);
  std::vector<Buffer> states;
  for (int i = 0; i < n_states; ++i) states.push_back(Buffer::zeros(DType::f32, {Hv, D, D}));
  size_t next = 0;
  for (auto _ : st) {
    fn(in.q, in.k, in.v, in.g, in.beta, states[next], in.o);
    next = (next + 1) % states.size();
    benchmark::ClobberMemory();
  }
  const double iters = double(st.iterations());
  const double state_bytes = double(Hv * D * D) * 4;
  st.counters["tok/s"] = benchmark::Counter(iters * double(T), benchmark::Counter::kIsRate);
  // One state read + one write per call is the least traffic any implementation needs.
  st.counters["state_GB/s"] = benchmark::Counter(iters * 2 * state_bytes / 1e9, benchmark::Counter::kIsRate);
  // Nominal work: the recurrence's ~4 Dk·Dv MACs per token and head (decay+u, update, output), 2 flops each.
  st.counters["GFLOP/s"] = benchmark::Counter(iters * double(T * Hv) * 8.0 * D * D / 1e9, benchmark::Counter::kIsRate);
}

void BM_gdn_recurrent_T1(benchmark::State& st) { run(st, kapitsa::ops::cpu::backend()->gated_delta_rule_recurrent, 1); }
void BM_gdn_recurrent_T512(benchmark::State& st) { run(st, kapitsa::ops::cpu::backend()->gated_delta_rule_recurrent, 512); }
void BM_gdn_recurrent_T1_48states(benchmark::State& st) {
  run(st, kapitsa::ops::cpu::backend()->gated_delta_rule_recurrent, 1, 48);
}
void BM_gdn_chunked_T512(benchmark::State& st) { run(st, kapitsa::ops::cpu::backend()->gated_delta_rule_chunked, 512); }
void BM_gdn_chunked_T1(benchmark::State& st) { run(st, kapitsa::ops::cpu::backend()->gated_delta_rule_chunked, 1); }
BENCHMARK(BM_gdn_recurrent_T1)->UseRealTime();
BENCHMARK(BM_gdn_recurrent_T1_48states)->UseRealTime();
BENCHMARK(BM_gdn_chunked_T1)->UseRealTime();
BENCHMARK(BM_gdn_recurrent_T512)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gdn_chunked_T512)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
