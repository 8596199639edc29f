// fill_mask against brute force: at random states of several grammars (reached by random walks over
// allowed tokens), the mask must equal "accept_token on a fresh copy of the matcher" for every token
// of the demo tokenizer and for a random sample of the Qwen3 tokenizer's 151k tokens.
#include "test_util.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/matcher.h"
#include "text/grammar/tool_call_grammar.h"
#include "text/grammar/vocabulary.h"
#include "text/tokenizer/tokenizer.h"
#include "tokenizer_fixture.h"

#include <gtest/gtest.h>

#include <random>

namespace kapitsa::text {
namespace {

const Tokenizer& demo_tokenizer() {
  static const Tokenizer* tok = [] {
    auto t = Tokenizer::load(testing::test_data_path("../models/demo/target"));
    if (!t.ok()) {
      ADD_FAILURE() << t.error().message;
      std::abort();
    }
    return new Tokenizer(std::move(t).value());
  }();
  return *tok;
}

std::vector<std::shared_ptr<const Grammar>> grammars() {
  std::vector<std::shared_ptr<const Grammar>> out;
  const Json schema = Json::parse(R"({"type":"object","properties":{
      "name":{"type":"string"},"n":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","bé","c d"]}},
      "x":{"type":["number","null"]}},"required":["name"]})");
  out.push_back(*grammar_from_json_schema(schema));
  GrammarStart start;
  start.in_reasoning = true;
  out.push_back(*grammar_for_json_object(start));
  const Json tools = Json::parse(R"([{"type":"function","function":{"name":"run","parameters":{"type":"object",
      "properties":{"cmd":{"type":"string"},"timeout":{"type":"integer"}},"required":["cmd"]}}}])");
  out.push_back(*grammar_for_tool_call(ToolFormat::qwen_xml, tools));
  out.push_back(*parse_gbnf("root ::= ([a-z]+ \" \")* \"\xe4\xb8\xad\xe6\x96\x87\" [^\\x00-\\x7f]{1,3}"));
  return out;
}

// Walks `steps` random allowed tokens, checking the mask against brute force at each step on `ids`.
void check(const std::shared_ptr<const Grammar>& g, const TokenVocabulary& vocab, const std::vector<int32_t>& ids,
           std::mt19937_64& rng, int steps) {
  GrammarMatcher m(g);
  std::vector<uint8_t> mask;
  int32_t end_id = 0;  // a special token plays end-of-generation
  while (!vocab.is_special(end_id)) ++end_id;
  const std::vector<int32_t> end_ids{end_id};
  for (int s = 0; s < steps; ++s) {
    m.fill_mask(vocab, mask, end_ids);
    ASSERT_EQ(mask.size(), static_cast<size_t>(vocab.size()));
    std::vector<int32_t> allowed;
    for (int32_t id : ids) {
      GrammarMatcher copy = m;
      bool expect = copy.accept_token(id, vocab);
      if (id == end_id) expect = m.can_end();
      ASSERT_EQ(mask[static_cast<size_t>(id)] != 0, expect)
          << "step " << s << " token " << id << " '" << vocab.token_bytes(id) << "'\n" << g->to_string().substr(0, 2000);
    }
    for (int32_t id = 0; id < vocab.size(); ++id)
      if (mask[static_cast<size_t>(id)] && id != end_id) allowed.push_back(id);
    if (allowed.empty()) {
      EXPECT_TRUE(m.is_complete());  // a live grammar always has a continuation or has ended
      return;
    }
    const int32_t pick = allowed[rng() % allowed.size()];
    ASSERT_TRUE(m.accept_token(pick, vocab));
  }
}

TEST(GrammarMask, EqualsBruteForceOnDemoVocabulary) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const TokenVocabulary vocab(demo_tokenizer());
  std::vector<int32_t> ids(static_cast<size_t>(vocab.size()));
  for (int32_t i = 0; i < vocab.size(); ++i) ids[static_cast<size_t>(i)] = i;
  // The sanitizer pass walks once, 4 steps (the brute force over the vocabulary is the cost).
  const int walks = testing::kUnderAddressSanitizer ? 1 : 2, steps = testing::kUnderAddressSanitizer ? 4 : 10;
  for (const auto& g : grammars())
    for (int walk = 0; walk < walks; ++walk) check(g, vocab, ids, rng, steps);
}

TEST(GrammarMask, EqualsBruteForceOnQwen3Sample) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const TokenVocabulary vocab(testing::qwen3_tokenizer());
  ASSERT_GT(vocab.size(), 150000);
  std::vector<int32_t> ids;
  for (int i = 0; i < 3000; ++i) ids.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab.size())));
  // Tokens that matter for the grammars: markup, digits, quotes, special tokens.
  for (int32_t id = 0; id < vocab.size(); ++id)
    if (vocab.is_special(id)) {
      ids.push_back(id);
      break;
    }
  for (const char* t : {"<tool_call>", "</tool_call>", "<think>", "</think>", "<|im_end|>", "{\"", "\":", "0", "12", "\"", " \"", "Ġ\""})
    if (auto id = testing::qwen3_tokenizer().token_id(t)) ids.push_back(*id);
  for (const auto& g : grammars()) check(g, vocab, ids, rng, testing::kUnderAddressSanitizer ? 6 : 20);
}

TEST(GrammarMask, SpecialTokensOnlyAsEndIds) {
  const auto& tok = testing::qwen3_tokenizer();
  const TokenVocabulary vocab(tok);
  const int32_t im_end = *tok.token_id("<|im_end|>");
  const int32_t tool_call = *tok.token_id("<tool_call>");
  EXPECT_TRUE(vocab.is_special(im_end));
  EXPECT_FALSE(vocab.is_special(tool_call));
  auto g = *parse_gbnf("root ::= \"<tool_call>\" | \"<|im_end|>\"");
  GrammarMatcher m(g);
  std::vector<uint8_t> mask;
  const std::vector<int32_t> end{im_end};
  m.fill_mask(vocab, mask, end);
  EXPECT_TRUE(mask[static_cast<size_t>(tool_call)]);
  EXPECT_FALSE(mask[static_cast<size_t>(im_end)]);  // the grammar cannot end yet; text never matches a special
  EXPECT_FALSE(m.accept_token(im_end, vocab));
  ASSERT_TRUE(m.accept_token(tool_call, vocab));
  EXPECT_TRUE(m.is_complete());
  m.fill_mask(vocab, mask, end);
  size_t n = 0;
  for (uint8_t a : mask) n += a;
  EXPECT_EQ(n, 1u);
  EXPECT_TRUE(mask[static_cast<size_t>(im_end)]);
}

}  // namespace
}  // namespace kapitsa::text
