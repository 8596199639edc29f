// Tokenizer throughput (Google Benchmark): encode MB/s on ~4 MB of mixed text (the golden strings:
// code, English, CJK, Korean, emoji, whitespace runs — shuffled, with random numbers between them),
// with and without the per-piece cache, and decode. Tokenizer folder: $KAPITSA_TOKENIZER_DIR or the
// Qwen3 test data.
#include "text/tokenizer/tokenizer.h"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

namespace {

using kapitsa::text::Tokenizer;

std::string tokenizer_dir() {
  if (const char* dir = std::getenv("KAPITSA_TOKENIZER_DIR")) return dir;
  return (std::filesystem::path(__FILE__).parent_path() / "../tests/text/data/qwen3").string();
}

const Tokenizer& tokenizer() {
  static const Tokenizer* tok = [] {
    auto t = Tokenizer::load(tokenizer_dir());
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.error().message.c_str());
      std::exit(1);
    }
    return new Tokenizer(std::move(t).value());
  }();
  return *tok;
}

const std::string& mixed_text() {
  static const std::string text = [] {
    auto golden = kapitsa::read_json_file(tokenizer_dir() + "/golden.json");
    if (!golden.ok()) {
      std::fprintf(stderr, "%s\n", golden.error().message.c_str());
      std::exit(1);
    }
    std::vector<std::string> pieces;
    for (const auto& e : *golden) pieces.push_back(e["text"].get<std::string>());
    std::mt19937_64 rng(1234);
    std::string s;
    while (s.size() < (4u << 20)) {
      s += pieces[rng() % pieces.size()];
      s += " " + std::to_string(rng() % 1000000) + "\n";
    }
    return s;
  }();
  return text;
}

void BM_Encode(benchmark::State& state) {
  const Tokenizer& tok = tokenizer();
  const std::string& text = mixed_text();
  size_t n_tokens = 0;
  for (auto _ : state) {
    auto ids = tok.encode(text);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
}
BENCHMARK(BM_Encode)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_EncodeNoCache(benchmark::State& state) {
  const Tokenizer& tok = tokenizer();
  const std::string& text = mixed_text();
  for (auto _ : state) {
    auto ids = tok.encode_uncached(text);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_EncodeNoCache)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_Decode(benchmark::State& state) {
  const Tokenizer& tok = tokenizer();
  const std::string& text = mixed_text();
  const auto ids = tok.encode(text);
  for (auto _ : state) {
    auto s = tok.decode(ids);
    benchmark::DoNotOptimize(s.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);

void BM_Load(benchmark::State& state) {
  for (auto _ : state) {
    auto t = Tokenizer::load(tokenizer_dir());
    benchmark::DoNotOptimize(t.ok());
  }
}
BENCHMARK(BM_Load)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
