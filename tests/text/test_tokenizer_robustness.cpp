// Random and mutated inputs into the tokenizer: no crash, no hang, decode(encode(x)) gives back x
// (made valid UTF-8) whenever x is already NFC, the cache never changes results, and pathological
// runs (100k spaces, newlines, one letter, digits) encode in bounded time.
#include "text/tokenizer/normalizer.h"
#include "text/tokenizer/utf8.h"
#include "tokenizer_fixture.h"

#include <utf8proc.h>

#include <chrono>
#include <cstdlib>
#include <random>

namespace kapitsa::testing {
namespace {

const char* const kFragments[] = {"<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "<|endoftext|>",
                                  " ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "é", "e\xCC\x81", "한", "😀", "\xF0\x9F",
                                  "\xFF", "\xC0", "123", "abc", "ABC", "_", "::", "{}", "\xE2\x80\xAF", "\xC2\x85"};

std::string mutate(std::mt19937_64& rng, std::string s) {
  const int edits = 1 + static_cast<int>(rng() % 8);
  for (int e = 0; e < edits; ++e) {
    const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 4) {
      case 0: s.insert(at, kFragments[rng() % std::size(kFragments)]); break;
      case 1: s.insert(at, 1, static_cast<char>(rng() % 256)); break;
      case 2:
        if (!s.empty()) s.erase(std::min(at, s.size() - 1), 1 + rng() % 4);
        break;
      case 3:
        if (!s.empty()) s[std::min(at, s.size() - 1)] = static_cast<char>(rng() % 256);
        break;
    }
  }
  return s;
}

void check_round_trip(const text::Tokenizer& tok, const text::Normalizer& nfc, const std::string& input) {
  const std::vector<int32_t> ids = tok.encode(input);
  for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
  const std::string decoded = tok.decode(ids);
  ASSERT_TRUE(text::utf8_is_valid(decoded));
  const std::string valid = text::utf8_lossy(input);
  if (nfc.apply(valid) == valid) {
    EXPECT_EQ(decoded, valid) << Json(valid).dump();
  }
  EXPECT_EQ(tok.encode_uncached(input), ids) << Json(valid).dump();
}

TEST(TokenizerRobustness, RandomAndMutatedInputs) {
  const text::Tokenizer& tok = qwen3_tokenizer();
  const auto nfc = text::Normalizer::from_json(Json{{"type", "NFC"}}, "test");
  ASSERT_TRUE(nfc.ok());
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 400; ++trial) {
    std::string s;
    if (trial % 2 == 0) {
      s = mutate(rng, qwen3_golden()[rng() % qwen3_golden().size()].text);
    } else {
      const size_t n = rng() % 64;
      for (size_t i = 0; i < n; ++i)
        s += rng() % 2 ? std::string(1, static_cast<char>(rng() % 256)) : kFragments[rng() % std::size(kFragments)];
    }
    check_round_trip(tok, *nfc, s);
    if (HasFatalFailure()) return;
  }
}

TEST(TokenizerRobustness, PathologicalRunsStayFast) {
  const text::Tokenizer& tok = qwen3_tokenizer();
  const auto nfc = text::Normalizer::from_json(Json{{"type", "NFC"}}, "test");
  const std::string runs[] = {std::string(100000, ' '), std::string(100000, '\n'), std::string(100000, 'a'),
                              std::string(50000, '7'), std::string(30000, '\xE4') , [] {
                                std::string s;
                                for (int i = 0; i < 20000; ++i) s += " \n";
                                return s + "x";
                              }()};
  for (const std::string& s : runs) {
    const auto start = std::chrono::steady_clock::now();
    check_round_trip(tok, *nfc, s);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 20.0) << "run of " << s.size() << " bytes starting " << int(s[0]);  // a hang, not a speed test
  }
}

TEST(TokenizerRobustness, NfcFastPathMatchesUtf8proc) {
  // The normalizer skips utf8proc for text NFC cannot change; random mixes of tricky characters must
  // still come out exactly as utf8proc's full NFC.
  const char* const pool[] = {"a", "e", " ", "\xCC\x81" /* U+0301 */, "\xCC\xA3" /* U+0323 */, "\xC3\xA9" /* é */,
                              "\xE1\x84\x80" /* jamo L */, "\xE1\x85\xA1" /* jamo V */, "\xE1\x86\xA8" /* jamo T */,
                              "\xEA\xB0\x80" /* 가 */, "\xE4\xB8\xAD" /* 中 */, "\xF0\x9F\x98\x80",
                              "\xE2\x84\xAB" /* Å sign */, "\xE2\x84\xA6" /* Ω sign */, "\xE0\xAF\x86" /* Tamil E */,
                              "\xE0\xAE\xBE" /* Tamil AA */, "\xE3\x81\x8B" /* か */, "\xE3\x82\x99" /* voiced mark */,
                              "\xD0\xB8" /* и */, "\xCC\x86" /* U+0306 */, "\xEF\xAC\x80" /* ﬀ */, "\xC2\xA0"};
  const auto nfc = text::Normalizer::from_json(Json{{"type", "NFC"}}, "test");
  ASSERT_TRUE(nfc.ok());
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string s;
    const size_t n = rng() % 12;
    for (size_t i = 0; i < n; ++i) s += pool[rng() % std::size(pool)];
    auto* reference = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(s.c_str()));
    ASSERT_NE(reference, nullptr);
    EXPECT_EQ(nfc->apply(s), std::string(reinterpret_cast<const char*>(reference))) << Json(s).dump();
    std::free(reference);
  }
}

TEST(TokenizerRobustness, RandomIdsDecode) {
  const text::Tokenizer& tok = qwen3_tokenizer();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids(rng() % 100);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % (tok.vocab_size() + 100)) - 50;
    EXPECT_TRUE(text::utf8_is_valid(tok.decode(ids)));
    EXPECT_TRUE(text::utf8_is_valid(tok.decode(ids, true)));
  }
}

}  // namespace
}  // namespace kapitsa::testing
