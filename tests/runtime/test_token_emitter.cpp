// TokenEmitter with runs of several tokens per step (what speculative decoding feeds): a run gives
// exactly what emitting its tokens one at a time gives, cut at the first stop — a stop string spanning
// two tokens of the run, a stop id or EOS in the middle, max_tokens reached in the middle — or at the
// first token the grammar rejects (the sequence goes on); byte-level tokens complete a UTF-8 character
// across the run. Real tokenizer (qwen3), no model.
#include "runtime/token_emitter.h"
#include "test_util.h"
#include "text/grammar/grammar.h"
#include "text/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <random>

namespace kapitsa::runtime {
namespace {

std::shared_ptr<const text::Tokenizer> tokenizer() {
  static std::shared_ptr<const text::Tokenizer> tok = [] {
    auto t = text::Tokenizer::load(testing::test_data_path("text/data/qwen3"));
    if (!t.ok()) {
      ADD_FAILURE() << t.error().message;
      std::abort();
    }
    return std::make_shared<const text::Tokenizer>(std::move(t).value());
  }();
  return tok;
}

constexpr int32_t kEos = 151645;  // <|im_end|>

std::unique_ptr<Sequence> sequence(GenerateRequest r) {
  if (r.prompt_ids.empty()) r.prompt_ids = {9707};
  SequenceSetup setup{tokenizer(), {kEos}, tokenizer()->vocab_size(), 0};
  return make_sequence(1, std::move(r), std::make_shared<Channel>(), 7, setup);
}

GenerateRequest request(int max_tokens) {
  GenerateRequest r;
  r.max_tokens = max_tokens;
  return r;
}

std::vector<TokenEvent> run_of(const std::vector<int32_t>& ids) {
  std::vector<TokenEvent> run;
  for (int32_t id : ids) {
    TokenEvent e;
    e.id = id;
    e.logprob = -0.5f - static_cast<float>(run.size());
    e.text = "ignored";
    run.push_back(e);
  }
  return run;
}

std::string text_of(const Emission& e) {
  std::string s;
  for (const TokenEvent& t : e.events) s += t.text;
  return s;
}

std::vector<int32_t> ids_of(const Emission& e) {
  std::vector<int32_t> ids;
  for (const TokenEvent& t : e.events) ids.push_back(t.id);
  return ids;
}

// Plain decoding: one token per step, until one ends the generation or the grammar drops it.
Emission one_at_a_time(const TokenEmitter& emitter, Sequence& seq, std::span<const TokenEvent> run) {
  Emission all;
  for (const TokenEvent& t : run) {
    Emission one = emitter.emit(seq, std::span<const TokenEvent>(&t, 1));
    all.events.insert(all.events.end(), one.events.begin(), one.events.end());
    if (one.ending) {
      all.ending = one.ending;
      break;
    }
    if (one.events.empty()) break;
  }
  return all;
}

void expect_same(const Emission& a, const Emission& b) {
  EXPECT_EQ(ids_of(a), ids_of(b));
  ASSERT_EQ(a.events.size(), b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) {
    EXPECT_EQ(a.events[i].text, b.events[i].text) << "event " << i;
    EXPECT_EQ(a.events[i].logprob, b.events[i].logprob) << "event " << i;
  }
  ASSERT_EQ(a.ending.has_value(), b.ending.has_value());
  if (a.ending) {
    EXPECT_EQ(a.ending->reason, b.ending->reason);
    EXPECT_EQ(a.ending->matched, b.ending->matched);
  }
}

TEST(TokenEmitter, StopStringSpanningTwoTokensOfTheRun) {
  const std::vector<int32_t> ids = tokenizer()->encode("hello world and more");
  ASSERT_GE(ids.size(), 4u);
  ASSERT_EQ(tokenizer()->decode(std::span<const int32_t>(ids.data(), 2)), "hello world");
  GenerateRequest r = request(100);
  r.stop_strings = {"lo wor"};  // "hel|lo" in the first token, " wor|ld" in the second
  auto seq = sequence(r);
  const TokenEmitter emitter({kEos}, tokenizer().get());
  const Emission e = emitter.emit(*seq, run_of(ids));
  ASSERT_TRUE(e.ending.has_value());
  EXPECT_EQ(e.ending->reason, FinishReason::stop);
  EXPECT_EQ(e.ending->matched, "lo wor");
  EXPECT_EQ(ids_of(e), std::vector<int32_t>(ids.begin(), ids.begin() + 2));  // the rest is dropped
  EXPECT_EQ(text_of(e), "hel");
  EXPECT_EQ(seq->generated, 2);
  EXPECT_EQ(seq->tokens.size(), 3u);
  EXPECT_EQ(e.events[0].logprob, -0.5f);  // the run's logprobs travel with their tokens
}

TEST(TokenEmitter, StopIdInTheMiddleEndsTheRunThere) {
  const std::vector<int32_t> ids = tokenizer()->encode("one, two, three");
  const int32_t comma = tokenizer()->encode(",").at(0);
  const auto at = std::find(ids.begin(), ids.end(), comma);
  ASSERT_NE(at, ids.end());
  GenerateRequest r = request(100);
  r.stop_token_ids = {comma};
  auto seq = sequence(r);
  const TokenEmitter emitter({kEos}, tokenizer().get());
  const Emission e = emitter.emit(*seq, run_of(ids));
  ASSERT_TRUE(e.ending.has_value());
  EXPECT_EQ(e.ending->reason, FinishReason::stop);
  EXPECT_EQ(e.ending->matched, ",");
  EXPECT_EQ(ids_of(e), std::vector<int32_t>(ids.begin(), at + 1));  // the stop id is kept, its text never shown
  EXPECT_EQ(text_of(e), "one");
  EXPECT_EQ(seq->tokens.back(), comma);

  // EOS in the middle: a stop with no matched text; ignored under ignore_eos.
  std::vector<int32_t> with_eos = {ids[0], kEos, ids[1]};
  auto plain = sequence(request(100));
  const Emission eos = emitter.emit(*plain, run_of(with_eos));
  ASSERT_TRUE(eos.ending.has_value());
  EXPECT_EQ(eos.ending->matched, "");
  EXPECT_EQ(eos.events.size(), 2u);
  GenerateRequest ignoring = request(100);
  ignoring.ignore_eos = true;
  auto ignores = sequence(ignoring);
  EXPECT_FALSE(emitter.emit(*ignores, run_of(with_eos)).ending.has_value());
  EXPECT_EQ(ignores->generated, 3);
}

TEST(TokenEmitter, MaxTokensReachedInTheMiddle) {
  const std::vector<int32_t> ids = tokenizer()->encode("alpha beta gamma delta epsilon");
  ASSERT_GE(ids.size(), 5u);
  GenerateRequest r = request(3);
  r.stop_strings = {"gamma delta"};  // held back text ("gamma" could start it) is released at the end
  auto seq = sequence(r);
  const TokenEmitter emitter({kEos}, tokenizer().get());
  const Emission e = emitter.emit(*seq, run_of(ids));
  ASSERT_TRUE(e.ending.has_value());
  EXPECT_EQ(e.ending->reason, FinishReason::length);
  EXPECT_EQ(e.events.size(), 3u);
  EXPECT_EQ(text_of(e), tokenizer()->decode(std::span<const int32_t>(ids.data(), 3)));
  EXPECT_EQ(seq->generated, 3);

  // Over two runs: the budget counts across them.
  auto twice = sequence(request(3));
  EXPECT_FALSE(emitter.emit(*twice, run_of({ids[0], ids[1]})).ending.has_value());
  const Emission second = emitter.emit(*twice, run_of({ids[2], ids[3]}));
  ASSERT_TRUE(second.ending.has_value());
  EXPECT_EQ(second.ending->reason, FinishReason::length);
  EXPECT_EQ(second.events.size(), 1u);
}

TEST(TokenEmitter, GrammarRejectingATokenDropsItAndTheRest) {
  auto grammar = text::parse_gbnf("root ::= [a-z]+ \".\"");
  ASSERT_TRUE(grammar.ok()) << grammar.error().message;
  const std::vector<int32_t> ids = tokenizer()->encode("hello world.");
  ASSERT_GE(ids.size(), 3u);
  GenerateRequest r = request(100);
  r.grammar = *grammar;
  auto seq = sequence(r);
  const TokenEmitter emitter({kEos}, tokenizer().get());
  const Emission e = emitter.emit(*seq, run_of(ids));  // " world" has a space: rejected
  EXPECT_FALSE(e.ending.has_value());                  // the sequence goes on
  EXPECT_EQ(ids_of(e), std::vector<int32_t>{ids[0]});
  EXPECT_EQ(text_of(e), "hello");
  EXPECT_EQ(seq->tokens.size(), 2u);
  // The grammar advanced over the kept token only: EOS is not allowed yet ("." missing), "." then EOS is.
  EXPECT_TRUE(emitter.emit(*seq, run_of({kEos})).events.empty());
  std::vector<int32_t> dot_then_eos = tokenizer()->encode(".");
  dot_then_eos.insert(dot_then_eos.end(), {kEos, ids[0]});
  const Emission end = emitter.emit(*seq, run_of(dot_then_eos));
  ASSERT_TRUE(end.ending.has_value());
  EXPECT_EQ(end.ending->reason, FinishReason::stop);
  EXPECT_EQ(end.events.size(), 2u);
  EXPECT_EQ(text_of(end), ".");
}

TEST(TokenEmitter, ByteTokensCompleteACharacterAcrossTheRun) {
  const std::string text = "ok 🦀 龘 done";
  const std::vector<int32_t> ids = tokenizer()->encode(text);
  // At least one character is split over byte-level tokens.
  bool split = false;
  for (int32_t id : ids) split |= tokenizer()->decode(std::span<const int32_t>(&id, 1)).find("\xEF\xBF\xBD") != std::string::npos;
  ASSERT_TRUE(split);
  auto seq = sequence(request(100));
  const TokenEmitter emitter({kEos}, tokenizer().get());
  const Emission e = emitter.emit(*seq, run_of(ids));
  EXPECT_FALSE(e.ending.has_value());
  ASSERT_EQ(e.events.size(), ids.size());
  int empty = 0;
  for (const TokenEvent& t : e.events) {
    empty += t.text.empty();
    if (!t.text.empty()) {
      const unsigned char last = static_cast<unsigned char>(t.text.back());
      EXPECT_TRUE(last < 0x80 || (last & 0xC0) == 0x80) << "a piece ends inside a character";
    }
  }
  EXPECT_GT(empty, 0);  // the first bytes of a split character show nothing yet
  EXPECT_EQ(text_of(e), text);
}

// Random texts, stops and budgets, cut into random runs: the same events, endings and sequence as one
// token at a time.
TEST(TokenEmitter, RunsEqualOneTokenAtATime) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const std::vector<std::string> words = {"ab", " cd", "é", "日本", "🙂", ",", " stop", "x\n", "ba"};
  const int32_t comma = tokenizer()->encode(",").at(0);
  const TokenEmitter emitter({kEos}, tokenizer().get());
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    for (size_t i = 0, n = 1 + rng() % 12; i < n; ++i) text += words[rng() % words.size()];
    std::vector<int32_t> ids = tokenizer()->encode(text);
    if (rng() % 4 == 0) ids.insert(ids.begin() + static_cast<std::ptrdiff_t>(rng() % (ids.size() + 1)), kEos);
    GenerateRequest r = request(1 + static_cast<int>(rng() % 20));
    if (rng() % 2) r.stop_strings = {"b,", "cd ", "本🙂"};
    if (rng() % 3 == 0) r.stop_token_ids = {comma};
    auto runs = sequence(r), singles = sequence(r);
    const std::vector<TokenEvent> all = run_of(ids);
    Emission by_runs, by_one;
    for (size_t at = 0; at < all.size() && !by_runs.ending;) {
      const size_t n = std::min(all.size() - at, 1 + static_cast<size_t>(rng() % 5));
      Emission e = emitter.emit(*runs, std::span<const TokenEvent>(all).subspan(at, n));
      by_runs.events.insert(by_runs.events.end(), e.events.begin(), e.events.end());
      by_runs.ending = e.ending;
      at += n;
    }
    by_one = one_at_a_time(emitter, *singles, all);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " text " << text);
    expect_same(by_runs, by_one);
    EXPECT_EQ(runs->tokens, singles->tokens);
    EXPECT_EQ(runs->generated, singles->generated);
  }
}

}  // namespace
}  // namespace kapitsa::runtime
