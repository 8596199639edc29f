// Runtime benchmark (whole process, not Google Benchmark): through the Engine, on a random checkpoint
// written from a config (or an existing model folder):
//   1. aggregate decode tokens/s with 1, 4 and 16 sequences decoding concurrently, measured over the
//      window in which all of them are decoding;
//   2. time to first token of turn 2 of a ~4k-token conversation, cold (empty prefix cache) vs cached
//      (the engine that served turn 1, which also folded two end-of-turn ids after the reply), and the
//      memory the cache holds after turn 1 (snapshots share KV pages: the pool counts each once).
// Not a test; run it by hand:
//   build/release/bench/bench_runtime --config bench/configs/qwen35-0.8b.json [--turn1 4000] [--decode 32]
//   [--kv-dtype f32|bf16|f16]  (the engine's KV pages; default f32, EngineOptions' default)
//   [--device cpu|cuda|cuda:N]  (where the model and its pools live; default cpu)
#include "cli/bench/timeline.h"  // header-only: the same measurement as kapitsa bench
#include "models/model.h"
#include "ops/memory.h"
#include "runtime/engine.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

using namespace kapitsa;

namespace {

using cli::bench::greedy;
using cli::bench::random_ids;
using cli::bench::read_all;
using cli::bench::Timeline;

models::LoadOptions load_options;  // --device: every engine's model is loaded there

Expected<std::unique_ptr<runtime::Engine>> make_engine(const std::string& dir, const runtime::EngineOptions& o) {
  KAPITSA_TRY(auto model, models::load_model(dir, load_options));
  return runtime::Engine::create(std::move(model), nullptr, o);
}

// Aggregate tokens/s while all `n` sequences decode.
Expected<double> decode_throughput(const std::string& dir, int n, int prompt, int decode, DType kv, std::mt19937_64& rng) {
  runtime::EngineOptions o;
  o.kv_dtype = kv;
  o.max_sequences = n;
  o.context_tokens = prompt + decode + 8;
  o.prefix_cache_bytes = 0;
  KAPITSA_TRY(auto engine, make_engine(dir, o));
  const int64_t V = engine->model_info().vocab_size;
  std::vector<std::unique_ptr<runtime::Generation>> gens;
  for (int i = 0; i < n; ++i) {
    KAPITSA_TRY(auto g, engine->submit(greedy(random_ids(rng, static_cast<size_t>(prompt), V), decode)));
    gens.push_back(std::move(g));
  }
  std::vector<Timeline> timelines(static_cast<size_t>(n));
  std::vector<std::thread> readers;
  for (int i = 0; i < n; ++i) readers.emplace_back([&, i] { timelines[static_cast<size_t>(i)] = read_all(*gens[static_cast<size_t>(i)]); });
  for (auto& r : readers) r.join();
  return cli::bench::aggregate_decode_rate(timelines);
}

struct TurnTwo {
  double cold_ttft = 0, cached_ttft = 0;
  int prompt_tokens = 0, cached_tokens = 0;
  int snapshots = 0;
  int64_t snapshot_bytes = 0, kv_bytes = 0;
};

Expected<TurnTwo> conversation_ttft(const std::string& dir, int turn1, int reply, int user2, DType kv, std::mt19937_64& rng) {
  runtime::EngineOptions o;
  o.kv_dtype = kv;
  o.max_sequences = 1;
  o.context_tokens = turn1 + reply + user2 + 64;
  KAPITSA_TRY(auto warm, make_engine(dir, o));
  const int64_t V = warm->model_info().vocab_size;
  std::vector<int32_t> prompt = random_ids(rng, static_cast<size_t>(turn1), V);
  runtime::GenerateRequest first = greedy(prompt, reply);
  first.turn_boundary = prompt.size() - 3;  // "before the generation prompt"
  first.end_of_turn_ids = random_ids(rng, 2, V);  // as "<|im_end|>\n"
  KAPITSA_TRY(auto g1, warm->submit(first));
  const Timeline t1 = read_all(*g1);
  // Turn 2: the history (prompt + reply + end of turn, as a template renders it again) and the user's
  // new message.
  std::vector<int32_t> second = prompt;
  second.insert(second.end(), t1.ids.begin(), t1.ids.end());
  second.insert(second.end(), first.end_of_turn_ids.begin(), first.end_of_turn_ids.end());
  const std::vector<int32_t> user = random_ids(rng, static_cast<size_t>(user2), V);
  second.insert(second.end(), user.begin(), user.end());
  TurnTwo out;
  out.prompt_tokens = static_cast<int>(second.size());
  for (int i = 0; i < 1000 && warm->counters().end_of_turn_tokens == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the engine folds it when idle
  const runtime::EngineCounters c = warm->counters();
  out.snapshots = static_cast<int>(c.snapshots);
  out.snapshot_bytes = c.snapshot_bytes;
  out.kv_bytes = c.kv_pages_used * c.kv_page_bytes;
  KAPITSA_TRY(auto g2, warm->submit(greedy(second, 2)));
  Timeline cached = read_all(*g2);
  out.cached_ttft = cached.finish.stats.time_to_first_token_s;
  out.cached_tokens = cached.finish.stats.cached_prompt_tokens;
  o.prefix_cache_bytes = 0;
  KAPITSA_TRY(auto cold, make_engine(dir, o));
  KAPITSA_TRY(auto g3, cold->submit(greedy(second, 2)));
  out.cold_ttft = read_all(*g3).finish.stats.time_to_first_token_s;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Kapitsa runtime benchmark: concurrent decode throughput and cached time to first token"};
  std::string config = "bench/configs/qwen35-0.8b.json", model_dir;
  int prompt = 32, decode = 32, turn1 = 4000, reply = 64, user2 = 100;
  std::vector<int> concurrency = {1, 4, 16};
  uint64_t seed = 1;
  app.add_option("--config", config, "config.json of a random checkpoint (written once, cached in /tmp)");
  app.add_option("--model", model_dir, "Existing model folder (instead of --config)");
  app.add_option("--prompt", prompt, "Prompt tokens per sequence in the throughput runs");
  app.add_option("--decode", decode, "Tokens each sequence decodes in the throughput runs");
  app.add_option("--concurrency", concurrency, "Numbers of concurrent sequences");
  app.add_option("--turn1", turn1, "Tokens of the conversation before turn 2");
  app.add_option("--reply", reply, "Tokens of the first reply");
  app.add_option("--user2", user2, "Tokens of the second user message");
  app.add_option("--seed", seed, "Seed of the random checkpoint and prompts");
  std::string kv_name = "f32";
  app.add_option("--kv-dtype", kv_name, "Element type of the KV pages")->check(CLI::IsMember({"f32", "bf16", "f16"}));
  std::string device_name = "cpu";
  app.add_option("--device", device_name, "cpu (default), cuda or cuda:N");
  CLI11_PARSE(app, argc, argv);
  auto spec = ops::parse_device(device_name);
  Status selected = spec.ok() ? ops::select_device(*spec) : Status(spec.error());
  if (!selected.ok()) {
    fmt::print(stderr, "bench_runtime: {}\n", selected.error().message);
    return 2;
  }
  load_options.device = spec->device;
  const DType kv = kv_name == "bf16" ? DType::bf16 : kv_name == "f16" ? DType::f16 : DType::f32;
  if (model_dir.empty()) {
    model_dir = (std::filesystem::temp_directory_path() / "kapitsa-bench" / std::filesystem::path(config).stem()).string();
    if (!std::filesystem::exists(model_dir + "/model.safetensors")) {
      fmt::print(stderr, "writing a random checkpoint for {} to {}\n", config, model_dir);
      Status s = models::write_random_checkpoint(config, model_dir, seed);
      if (!s.ok()) {
        fmt::print(stderr, "bench_runtime: {}\n", s.error().message);
        return 1;
      }
    }
  }
  std::mt19937_64 rng(seed);
  fmt::print("model: {} (KV pages {}, device {})\n", model_dir, kv_name, ops::device_name(*spec));
  fmt::print("{:>12} {:>22}\n", "sequences", "aggregate decode tok/s");
  for (int n : concurrency) {
    auto tps = decode_throughput(model_dir, n, prompt, decode, kv, rng);
    if (!tps.ok()) {
      fmt::print(stderr, "bench_runtime: {}\n", tps.error().message);
      return 1;
    }
    fmt::print("{:>12} {:>22.1f}\n", n, *tps);
  }
  if (turn1 > 0) {
    auto t = conversation_ttft(model_dir, turn1, reply, user2, kv, rng);
    if (!t.ok()) {
      fmt::print(stderr, "bench_runtime: {}\n", t.error().message);
      return 1;
    }
    fmt::print("turn 2 of a {}-token conversation: time to first token cold {:.3f} s, cached {:.3f} s "
               "({} of {} prompt tokens reused)\n",
               t->prompt_tokens, t->cold_ttft, t->cached_ttft, t->cached_tokens, t->prompt_tokens);
    fmt::print("after turn 1: {} snapshots holding {:.1f} MiB (KV pool in use: {:.1f} MiB, each page once)\n",
               t->snapshots, t->snapshot_bytes / 1048576.0, t->kv_bytes / 1048576.0);
  }
  return 0;
}
