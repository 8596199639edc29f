// Stop strings and incremental text: stop strings split across pieces and tokens are found and never
// shown; text that might start a stop string is held back, then released when it does not; UTF-8
// characters split across tokens come out whole.
#include "runtime/text_stream.h"
#include "test_util.h"
#include "text/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <random>

namespace kapitsa::runtime {
namespace {

const text::Tokenizer& tokenizer() {
  static const text::Tokenizer* tok = [] {
    auto t = text::Tokenizer::load(testing::test_data_path("text/data/qwen3"));
    if (!t.ok()) {
      ADD_FAILURE() << t.error().message;
      std::abort();
    }
    return new text::Tokenizer(std::move(t).value());
  }();
  return *tok;
}

// Feeds `text` to a matcher in random pieces; returns what it released and whether/what it matched.
StopMatcher::Result feed_in_pieces(const std::vector<std::string>& stops, const std::string& text, std::mt19937_64& rng,
                                   bool flush = true) {
  StopMatcher m(stops);
  StopMatcher::Result all;
  size_t at = 0;
  while (at < text.size()) {
    const size_t n = std::min<size_t>(text.size() - at, 1 + rng() % 4);
    StopMatcher::Result r = m.push(std::string_view(text).substr(at, n));
    at += n;
    all.text += r.text;
    if (r.stopped) {
      all.stopped = true;
      all.matched = r.matched;
      return all;
    }
  }
  if (flush) all.text += m.flush();
  return all;
}

TEST(StopMatcher, MatchesAcrossPiecesAndNeverShowsTheStop) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    StopMatcher::Result r = feed_in_pieces({"</answer>", "STOP"}, "the answer is 42</answer> and more", rng);
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.matched, "</answer>");
    EXPECT_EQ(r.text, "the answer is 42");
  }
}

TEST(StopMatcher, EarliestMatchWins) {
  std::mt19937_64 rng(1);
  StopMatcher::Result r = feed_in_pieces({"world", "lo w"}, "hello world", rng);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.matched, "lo w");
  EXPECT_EQ(r.text, "hel");
}

TEST(StopMatcher, HeldTextIsReleasedWhenItIsNotAStop) {
  StopMatcher m({"</stop>"});
  StopMatcher::Result a = m.push("value </st");
  EXPECT_EQ(a.text, "value ");  // "</st" could start the stop string
  EXPECT_EQ(m.held(), 4u);
  StopMatcher::Result b = m.push("age>");
  EXPECT_FALSE(b.stopped);
  EXPECT_EQ(b.text, "</stage>");
  StopMatcher::Result c = m.push("<");
  EXPECT_EQ(c.text, "");
  EXPECT_EQ(m.flush(), "<");  // the end: nothing more can complete it
}

TEST(StopMatcher, WithoutStopsEverythingPassesAtOnce) {
  StopMatcher m({"", ""});
  StopMatcher::Result r = m.push("abc");
  EXPECT_EQ(r.text, "abc");
  EXPECT_FALSE(r.stopped);
}

TEST(StopMatcher, RandomTextsReleaseExactlyThePrefixBeforeTheFirstStop) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const std::vector<std::string> stops = {"aab", "ba", "ccc"};
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    const size_t n = rng() % 30;
    for (size_t i = 0; i < n; ++i) text += "abc"[rng() % 3];
    size_t first = std::string::npos;
    for (const std::string& s : stops) first = std::min(first, text.find(s));
    StopMatcher::Result r = feed_in_pieces(stops, text, rng);
    EXPECT_EQ(r.stopped, first != std::string::npos) << text;
    EXPECT_EQ(r.text, text.substr(0, first)) << text;
  }
}

TEST(TextStream, StopStringSplitAcrossTokens) {
  const text::Tokenizer& tok = tokenizer();
  const std::string text = "print(x)\n```\nDone. More text";
  const std::vector<int32_t> ids = tok.encode(text);
  ASSERT_GT(ids.size(), 5u);
  // The stop string spans several tokens.
  TextStream stream(&tok, {")\n```"});
  std::string out;
  bool stopped = false;
  for (int32_t id : ids) {
    StopMatcher::Result r = stream.push(id);
    out += r.text;
    if (r.stopped) {
      stopped = true;
      EXPECT_EQ(r.matched, ")\n```");
      break;
    }
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "print(x");
}

TEST(TextStream, MultiByteCharactersComeOutWhole) {
  const text::Tokenizer& tok = tokenizer();
  const std::string text = "naïve 日本語 🙂 emoji ok";
  const std::vector<int32_t> ids = tok.encode(text);
  TextStream stream(&tok, {"🙂"});
  std::string out;
  for (int32_t id : ids) {
    StopMatcher::Result r = stream.push(id);
    // Every released piece is valid UTF-8 on its own: no piece ends inside a character.
    if (!r.text.empty()) {
      const unsigned char last = static_cast<unsigned char>(r.text.back());
      EXPECT_TRUE(last < 0x80 || (last & 0xC0) == 0x80) << "ends with a lead byte";
    }
    out += r.text;
    if (r.stopped) break;
  }
  EXPECT_EQ(out, "naïve 日本語 ");
  TextStream plain(&tok, {});
  std::string all;
  for (int32_t id : ids) all += plain.push(id).text;
  all += plain.flush();
  EXPECT_EQ(all, text);
}

TEST(TextStream, NoTokenizerGivesNoText) {
  TextStream stream(nullptr, {"x"});
  EXPECT_EQ(stream.push(5).text, "");
  EXPECT_EQ(stream.flush(), "");
}

}  // namespace
}  // namespace kapitsa::runtime
