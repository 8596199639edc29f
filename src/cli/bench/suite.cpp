// The measurements behind run_suite (suite.h). Every request is greedy with ignore_eos, so each one
// produces exactly the tokens asked for; the prefix cache is off, so nothing is reused between them.
#include "cli/bench/suite.h"

#include "cli/bench/timeline.h"
#include "cli/kv_dtype_option.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/proposer.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

namespace kapitsa::cli::bench {
namespace {

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

Expected<Timeline> generate(runtime::Engine& engine, std::vector<int32_t> prompt, int max_tokens) {
  KAPITSA_TRY(auto g, engine.submit(greedy(std::move(prompt), max_tokens)));
  Timeline t = read_all(*g);
  if (t.finish.reason == runtime::FinishReason::error) return error("generation failed: {}", t.finish.error);
  if (int(t.ids.size()) != max_tokens) return error("asked for {} tokens, got {}", max_tokens, t.ids.size());
  return t;
}

// Decode tokens/s of one timeline: tokens after the first over the time since the first.
double decode_rate(const Timeline& t) {
  return t.tokens.size() < 2 ? 0 : double(t.tokens.size() - 1) / seconds(t.tokens.front(), t.tokens.back());
}

Expected<std::unique_ptr<runtime::Engine>> make_engine(const std::string& dir, const SuiteOptions& o, int sequences,
                                                       int64_t context, std::shared_ptr<runtime::Proposer> proposer) {
  models::LoadOptions load;
  load.device = o.device;
  KAPITSA_TRY(auto model, models::load_model(dir, load));
  runtime::EngineOptions e;
  e.max_sequences = sequences;
  e.context_tokens = context;  // capped at the model's own limit by the engine
  e.prefix_cache_bytes = 0;
  e.kv_dtype = kv_dtype_from_name(o.kv_dtype);
  e.seed = 1;
  e.proposer = std::move(proposer);
  e.spec_tokens = o.spec_k;
  e.spec_cost_aware = true;  // as kapitsa run and serve draft
  return runtime::Engine::create(std::move(model), nullptr, e);
}

}  // namespace

Expected<Json> run_suite(const std::string& dir, const SuiteOptions& o, const std::function<void(const std::string&)>& log) {
  if (o.prompt < 1 || o.decode < 2 || o.sequences < 1) return error("bench: --prompt ≥ 1, --decode ≥ 2 and --sequences ≥ 1");
  std::mt19937_64 rng(42);
  int64_t longest = std::max<int64_t>(o.prompt + 1, o.decode + 33);
  for (int64_t c : o.ttft) longest = std::max(longest, c + 1);
  KAPITSA_TRY(auto engine, make_engine(dir, o, o.sequences, longest, nullptr));
  const models::ModelInfo& info = engine->model_info();
  const int64_t context = info.max_position_embeddings > 0 ? std::min(longest, info.max_position_embeddings) : longest;
  const int64_t V = info.vocab_size;
  Json out = Json::object();
  out["model"] = {{"type", info.model_type}, {"summary", info.summary}, {"weight_bytes_per_token", info.weight_bytes_per_token},
                  {"resident_weight_bytes", info.resident_weight_bytes}, {"max_context", info.max_position_embeddings}};

  log("warm-up");
  KAPITSA_RETURN_IF_ERROR(generate(*engine, random_ids(rng, 16, V), 4));  // pages the weights in

  log(fmt::format("prefill {} tokens", o.prompt));
  KAPITSA_TRY(Timeline prefill, generate(*engine, random_ids(rng, size_t(o.prompt), V), 1));
  const double prefill_s = prefill.finish.stats.time_to_first_token_s;
  out["prefill"] = {{"tokens", o.prompt}, {"seconds", prefill_s}, {"tokens_per_s", prefill_s > 0 ? o.prompt / prefill_s : 0}};

  log(fmt::format("decode {} tokens at batch 1", o.decode));
  KAPITSA_TRY(Timeline decode, generate(*engine, random_ids(rng, 32, V), o.decode));
  out["decode"] = {{"tokens", o.decode}, {"tokens_per_s", decode_rate(decode)}};

  out["ttft"] = Json::array();
  for (int64_t c : o.ttft) {
    if (c + 1 > context) {
      out["ttft"].push_back({{"context", c}, {"skipped", fmt::format("beyond the model's {}-token context", context)}});
      continue;
    }
    log(fmt::format("time to first token at {} tokens", c));
    KAPITSA_TRY(Timeline t, generate(*engine, random_ids(rng, size_t(c), V), 1));
    out["ttft"].push_back({{"context", c}, {"seconds", t.finish.stats.time_to_first_token_s}});
  }

  log(fmt::format("aggregate decode, {} sequences", o.sequences));
  {
    std::vector<std::unique_ptr<runtime::Generation>> gens;
    for (int i = 0; i < o.sequences; ++i) {
      KAPITSA_TRY(auto g, engine->submit(greedy(random_ids(rng, 32, V), o.decode)));
      gens.push_back(std::move(g));
    }
    std::vector<Timeline> lines(size_t(o.sequences));
    std::vector<std::thread> readers;
    for (int i = 0; i < o.sequences; ++i) readers.emplace_back([&, i] { lines[size_t(i)] = read_all(*gens[size_t(i)]); });
    for (std::thread& r : readers) r.join();
    auto rate = aggregate_decode_rate(lines);
    if (!rate.ok()) return error("aggregate decode: {}", rate.error().message);
    out["aggregate_decode"] = {{"sequences", o.sequences}, {"tokens_per_s", *rate}};
  }
  engine.reset();

  if (o.speculation) {
    // A prompt that repeats itself, so n-gram lookup has something to find; the same prompt both ways.
    const std::vector<int32_t> block = random_ids(rng, 48, V);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 4; ++i) prompt.insert(prompt.end(), block.begin(), block.end());
    log("decode with n-gram speculation off and on");
    KAPITSA_TRY(auto plain, make_engine(dir, o, 1, int64_t(prompt.size()) + o.decode + 8, nullptr));
    KAPITSA_TRY(Timeline off, generate(*plain, prompt, o.decode));
    plain.reset();
    KAPITSA_TRY(auto spec, make_engine(dir, o, 1, int64_t(prompt.size()) + o.decode + 8, std::make_shared<runtime::NgramProposer>()));
    KAPITSA_TRY(Timeline on, generate(*spec, prompt, o.decode));
    const runtime::GenerationStats& st = on.finish.stats;
    out["speculation"] = {{"proposer", "ngram"}, {"spec_k", o.spec_k}, {"off_tokens_per_s", decode_rate(off)},
                          {"on_tokens_per_s", decode_rate(on)}, {"proposed", st.draft_tokens},
                          {"accepted", st.draft_tokens_accepted}, {"same_output", off.ids == on.ids}};
  }
  return out;
}

}  // namespace kapitsa::cli::bench
