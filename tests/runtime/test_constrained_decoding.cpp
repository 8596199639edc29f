// Constrained decoding through the Engine on a tiny random model with the demo tokenizer: 100 seeded
// generations (temperature 1) under each of several JSON schemas all parse and validate; forced tool
// calls in each tool-call format parse with the model's parser and their arguments validate; a
// grammar without a tokenizer is refused; a grammar that is complete forces end-of-generation.
#include "common/json_schema_check.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "test_util.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/tool_call_grammar.h"
#include "text/parse/output_parser.h"
#include "text/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

namespace kapitsa::runtime {
namespace {

struct Harness {
  std::unique_ptr<Engine> engine;
  std::shared_ptr<const text::Tokenizer> tokenizer;
};

// A 2-layer (one Gated DeltaNet, one attention) random model shaped like the demo, hidden 64.
Harness& setup() {
  static Harness* s = [] {
    auto* out = new Harness;
    const std::string demo = testing::test_data_path("../models/demo/target");
    auto config = read_json_file(demo + "/config.json");
    if (!config.ok()) std::abort();
    Json& tc = (*config)["text_config"];
    tc["num_hidden_layers"] = 2;
    tc["layer_types"] = Json::array({"linear_attention", "full_attention"});
    tc["hidden_size"] = 64;
    tc["intermediate_size"] = 128;
    tc["head_dim"] = 32;
    tc["num_attention_heads"] = 2;
    tc["num_key_value_heads"] = 1;
    tc["linear_key_head_dim"] = 32;
    tc["linear_value_head_dim"] = 32;
    tc["linear_num_key_heads"] = 1;
    tc["linear_num_value_heads"] = 2;
    const auto dir = std::filesystem::temp_directory_path() / ("kapitsa-constrained-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "config.in.json") << config->dump(2);
    Status w = models::write_random_checkpoint((dir / "config.in.json").string(), (dir / "m").string(), 7);
    if (!w.ok()) {
      ADD_FAILURE() << w.error().message;
      std::abort();
    }
    auto model = models::load_model((dir / "m").string());
    auto tok = text::Tokenizer::load(demo);
    if (!model.ok() || !tok.ok()) {
      ADD_FAILURE() << (model.ok() ? tok.error().message : model.error().message);
      std::abort();
    }
    std::filesystem::remove_all(dir);
    out->tokenizer = std::make_shared<const text::Tokenizer>(std::move(tok).value());
    EngineOptions options;
    options.max_sequences = 16;
    options.context_tokens = 2048;
    auto engine = Engine::create(std::move(model).value(), out->tokenizer, options);
    if (!engine.ok()) std::abort();
    out->engine = std::move(engine).value();
    return out;
  }();
  return *s;
}

struct Result {
  std::string text;
  FinishEvent finish;
};

// Runs n generations under `grammar` at once (seeds base..base+n-1); returns their texts.
std::vector<Result> generate(const std::shared_ptr<const text::Grammar>& grammar, int n, uint64_t base, int max_tokens = 400) {
  Harness& s = setup();
  const std::vector<int32_t> prompt = s.tokenizer->encode("<|im_start|>user\nAnswer in JSON.<|im_end|>\n<|im_start|>assistant\n");
  std::vector<std::unique_ptr<Generation>> gens;
  for (int i = 0; i < n; ++i) {
    GenerateRequest r;
    r.prompt_ids = prompt;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = base + static_cast<uint64_t>(i);
    r.max_tokens = max_tokens;
    r.grammar = grammar;
    auto g = s.engine->submit(std::move(r));
    EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
    if (g.ok()) gens.push_back(std::move(g).value());
  }
  std::vector<Result> out;
  for (auto& g : gens) {
    Result r;
    Event e;
    while (g->next(e)) {
      if (auto* t = std::get_if<TokenEvent>(&e)) r.text += t->text;
      else r.finish = std::get<FinishEvent>(e);
    }
    out.push_back(std::move(r));
  }
  return out;
}

const char* kSchemas[] = {
    R"({"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"object","properties":{"c":{"type":"integer"}},
       "required":["c"]},"d":{"type":"boolean"}},"required":["b"]},"flag":{"type":"boolean"}},"required":["a"]})",
    R"({"type":"array","items":{"enum":["x","y z",7,null]},"minItems":1,"maxItems":5})",
    R"({"type":"object","properties":{"i":{"type":"integer"},"f":{"type":"number"},"n":{"type":["number","null"]},
       "big":{"type":"integer","minimum":0,"maximum":9007199254740991}},"required":["i","f","n","big"]})",
    R"({"type":"object","properties":{"r1":{"type":"boolean"},"o1":{"type":"integer"},"r2":{"enum":[1,2]},"o2":{"type":"null"},
       "o3":{"type":"array","items":{"type":"boolean"},"maxItems":3}},"required":["r1","r2"],"additionalProperties":false})",
    R"({"type":"object","properties":{"s":{"type":"string","maxLength":10},"t":{"type":"string","minLength":2,"maxLength":6},
       "u":{"type":"array","items":{"type":"string","maxLength":4},"maxItems":2}},"required":["s","t","u"]})",
};

TEST(ConstrainedDecoding, SamplerNeverPicksMaskedTokensAndKeepsRawLogprobs) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const size_t V = 500;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> logits(V);
    for (float& l : logits) l = normal(rng);
    std::vector<uint8_t> allowed(V, 0);
    const size_t n_allowed = 1 + rng() % 5;
    for (size_t i = 0; i < n_allowed; ++i) allowed[rng() % V] = 1;
    SamplingParams p;
    p.temperature = trial % 4 == 0 ? 0.0f : 0.5f + static_cast<float>(trial % 3);
    p.top_k = trial % 3 == 0 ? 3 : 0;
    p.top_p = trial % 5 == 0 ? 0.5f : 1.0f;
    p.min_p = trial % 7 == 0 ? 0.2f : 0.0f;
    if (trial % 11 == 0)  // every allowed token impossible: still one of them
      for (size_t i = 0; i < V; ++i)
        if (allowed[i]) logits[i] = -std::numeric_limits<float>::infinity();
    Sampler sampler(p, rng());
    TokenEvent event;
    const int32_t id = sampler.sample(logits, 2, &event, allowed);
    ASSERT_TRUE(allowed[static_cast<size_t>(id)]) << "trial " << trial;
    if (trial % 11 != 0) {
      EXPECT_FLOAT_EQ(event.logprob, token_logprob(logits, id));  // the unmasked distribution
      const auto top = top_logprobs(logits, 2);
      ASSERT_EQ(event.top.size(), top.size());
      for (size_t i = 0; i < top.size(); ++i) EXPECT_EQ(event.top[i].id, top[i].id);
    }
  }
}

TEST(ConstrainedDecoding, SchemasParseAndValidate) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  int k = 0;
  for (const char* text : kSchemas) {
    const Json schema = Json::parse(text);
    auto grammar = text::grammar_from_json_schema(schema);
    ASSERT_TRUE(grammar.ok()) << grammar.error().message;
    const int count = testing::kUnderAddressSanitizer ? 20 : 100;  // the sanitizer pass: fewer samples
    const auto results = generate(*grammar, count, seed + 1000 * static_cast<uint64_t>(k++));
    ASSERT_EQ(results.size(), static_cast<size_t>(count));
    for (const Result& r : results) {
      ASSERT_EQ(r.finish.reason, FinishReason::stop) << r.finish.error << "\noutput: " << r.text << "\nschema: " << text;
      const Json doc = Json::parse(r.text, nullptr, false);
      ASSERT_FALSE(doc.is_discarded()) << "not JSON: " << r.text << "\nschema: " << text;
      const std::string why = testing::schema_violation(doc, schema);
      EXPECT_TRUE(why.empty()) << why << "\noutput: " << r.text;
    }
  }
}

TEST(ConstrainedDecoding, ForcedToolCallsParseAndValidate) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Json tools = Json::parse(R"([
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{
       "city":{"type":"string","maxLength":12},"days":{"type":"integer"},"unit":{"enum":["c","f"]}},"required":["city","unit"]}}},
    {"name":"set_flags","input_schema":{"type":"object","properties":{"flags":{"type":"array","items":{"type":"boolean"},"maxItems":3},
       "note":{"type":"string","maxLength":5}},"required":["flags"]}}])");
  for (text::ToolFormat format : {text::ToolFormat::qwen_xml, text::ToolFormat::hermes_json, text::ToolFormat::nemotron}) {
    auto grammar = text::grammar_for_tool_call(format, tools);
    ASSERT_TRUE(grammar.ok()) << grammar.error().message;
    for (const Result& r : generate(*grammar, 32, seed + static_cast<uint64_t>(format) * 100)) {
      ASSERT_EQ(r.finish.reason, FinishReason::stop) << r.finish.error << "\n" << r.text;
      text::ParserOptions options;
      options.tools = format;
      options.tool_schemas = tools;
      text::OutputParser parser(options);
      text::ParseEvents events = parser.feed(r.text);
      for (auto& e : parser.finish()) events.push_back(std::move(e));
      std::vector<text::ToolCall> calls;
      for (const auto& e : events) {
        EXPECT_NE(e.kind, text::ParseEvent::Kind::warning) << e.text << "\n" << r.text;
        if (e.kind == text::ParseEvent::Kind::tool_call) calls.push_back(e.call);
      }
      ASSERT_EQ(calls.size(), 1u) << r.text;
      const bool weather = calls[0].name == "get_weather";
      EXPECT_TRUE(weather || calls[0].name == "set_flags") << calls[0].name;
      const Json& schema = weather ? tools[0]["function"]["parameters"] : tools[1]["input_schema"];
      const std::string why = testing::schema_violation(Json::parse(calls[0].arguments), schema);
      EXPECT_TRUE(why.empty()) << why << "\n" << r.text;
    }
  }
}

TEST(ConstrainedDecoding, CompleteGrammarForcesEndAndRefusalsAreClear) {
  auto grammar = text::parse_gbnf("root ::= \"ok\"");
  ASSERT_TRUE(grammar.ok());
  for (const Result& r : generate(*grammar, 4, 11)) {
    EXPECT_EQ(r.text, "ok");
    EXPECT_EQ(r.finish.reason, FinishReason::stop);
    EXPECT_LE(r.finish.stats.completion_tokens, 3);  // "o" "k" at most, then EOS
  }
  // Without a tokenizer the engine cannot mask: refused at submit.
  GenerateRequest r;
  r.prompt_ids = {1, 2, 3};
  r.grammar = *grammar;
  auto model_dir = testing::test_data_path("fixtures/qwen35-dense-tiny");
  auto model = models::load_model(model_dir);
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto bare = Engine::create(std::move(model).value(), nullptr);
  ASSERT_TRUE(bare.ok());
  auto g = (*bare)->submit(r);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("tokenizer"), std::string::npos) << g.error().message;
}

}  // namespace
}  // namespace kapitsa::runtime
