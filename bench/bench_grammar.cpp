// Constrained decoding cost (Google Benchmark) with the Qwen3 tokenizer (151k tokens): fill_mask at
// fixed points of a JSON document (/1: the trie walk with the DFA warm, /0: the per-state mask cache
// hit, as inside a string where the state repeats), a whole document
// replayed token by token on a fresh matcher (mask + accept per token, the cost a generation pays,
// DFA construction included), and building the TokenVocabulary. Tokenizer folder:
// $KAPITSA_TOKENIZER_DIR or the Qwen3 test data.
#include "text/grammar/json_schema.h"
#include "text/grammar/matcher.h"
#include "text/grammar/tool_call_grammar.h"
#include "text/grammar/vocabulary.h"
#include "text/tokenizer/tokenizer.h"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace {

using namespace kapitsa;
using namespace kapitsa::text;

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

const TokenVocabulary& vocab() {
  static const TokenVocabulary* v = new TokenVocabulary(tokenizer());
  return *v;
}

std::shared_ptr<const Grammar> schema_grammar() {
  static std::shared_ptr<const Grammar> g = [] {
    const Json schema = Json::parse(R"({"type":"object","properties":{
      "name":{"type":"string"},"age":{"type":"integer"},"email":{"type":"string"},
      "tags":{"type":"array","items":{"type":"string"}},
      "address":{"type":"object","properties":{"street":{"type":"string"},"zip":{"type":"string"}},"required":["street"]},
      "score":{"type":"number"}},"required":["name","age"]})");
    auto r = grammar_from_json_schema(schema);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.error().message.c_str());
      std::exit(1);
    }
    return *r;
  }();
  return g;
}

// Keys in the grammar's order: Json (nlohmann::json) keeps object keys sorted.
const char* kDocument =
    R"({"address": {"street": "12 St James's Square", "zip": "SW1Y 4JH"}, "age": 36, "email": "ada@example.org", )"
    R"("name": "Ada Lovelace", "score": 98.25, "tags": ["math", "poetry", "engines"]})";

// The matcher after `prefix` of the document, with its mask filled once (warm).
void fill_at(benchmark::State& state, std::string_view prefix, std::shared_ptr<const Grammar> g) {
  const bool walk = state.range(0) != 0;
  GrammarMatcher m(std::move(g));
  if (!m.accept_bytes(prefix)) {
    state.SkipWithError("prefix rejected");
    return;
  }
  std::vector<uint8_t> mask;
  const std::vector<int32_t> end{*tokenizer().token_id("<|im_end|>")};
  m.fill_mask(vocab(), mask, end);
  size_t allowed = 0;
  for (auto _ : state) {
    if (walk) {
      // A copy keeps the DFA built so far but not the mask cache: this times the trie walk.
      state.PauseTiming();
      GrammarMatcher copy = m;
      state.ResumeTiming();
      copy.fill_mask(vocab(), mask, end);
    } else {
      m.fill_mask(vocab(), mask, end);  // the state's mask is cached: a copy of 151k bytes
    }
    benchmark::DoNotOptimize(mask.data());
  }
  for (uint8_t a : mask) allowed += a;
  state.counters["allowed_tokens"] = static_cast<double>(allowed);
}

void BM_MaskStart(benchmark::State& s) { fill_at(s, "", schema_grammar()); }
void BM_MaskBetweenKeys(benchmark::State& s) { fill_at(s, R"({"age": 36, )", schema_grammar()); }
void BM_MaskInsideString(benchmark::State& s) { fill_at(s, R"({"age": 36, "name": "Ada Lo)", schema_grammar()); }
void BM_MaskInNumber(benchmark::State& s) { fill_at(s, R"({"age": 3)", schema_grammar()); }
void BM_MaskInArray(benchmark::State& s) { fill_at(s, R"({"age": 3, "name": "A", "tags": ["x", )", schema_grammar()); }
void BM_MaskJsonObjectString(benchmark::State& s) { fill_at(s, R"({"a": [1, {"b": "te)", *grammar_for_json_object()); }
void BM_MaskToolCallText(benchmark::State& s) {
  const Json tools = Json::parse(R"([{"type":"function","function":{"name":"write","parameters":{"type":"object",
      "properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}}}])");
  fill_at(s, "<tool_call>\n<function=write>\n<parameter=content>\ndef f(x):\n    return x <", *grammar_for_tool_call(ToolFormat::qwen_xml, tools));
}

// A generation's cost: fresh matcher, mask + accept for each token of the document.
void BM_DocumentPerToken(benchmark::State& state) {
  const std::vector<int32_t> ids = tokenizer().encode(kDocument);
  const std::vector<int32_t> end{*tokenizer().token_id("<|im_end|>")};
  std::vector<uint8_t> mask;
  for (auto _ : state) {
    GrammarMatcher m(schema_grammar());
    for (int32_t id : ids) {
      m.fill_mask(vocab(), mask, end);
      if (!mask[static_cast<size_t>(id)] || !m.accept_token(id, vocab())) {
        state.SkipWithError("document rejected");
        return;
      }
    }
    benchmark::DoNotOptimize(m.is_complete());
  }
  state.counters["tokens"] = static_cast<double>(ids.size());
  state.counters["us_per_token"] =
      benchmark::Counter(static_cast<double>(ids.size()), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_BuildVocabulary(benchmark::State& state) {
  for (auto _ : state) {
    TokenVocabulary v(tokenizer());
    benchmark::DoNotOptimize(v.nodes().size());
  }
  state.counters["trie_nodes"] = static_cast<double>(vocab().nodes().size());
}

BENCHMARK(BM_MaskStart)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);  // 1: trie walk, 0: cached
BENCHMARK(BM_MaskBetweenKeys)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);  // 1: trie walk, 0: cached
BENCHMARK(BM_MaskInsideString)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);  // 1: trie walk, 0: cached
BENCHMARK(BM_MaskInNumber)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);  // 1: trie walk, 0: cached
BENCHMARK(BM_MaskInArray)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);  // 1: trie walk, 0: cached
BENCHMARK(BM_MaskJsonObjectString)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);  // 1: trie walk, 0: cached
BENCHMARK(BM_MaskToolCallText)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);  // 1: trie walk, 0: cached
BENCHMARK(BM_DocumentPerToken)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BuildVocabulary)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
