// Tokenizer against the Hugging Face reference: golden encodings and decodings of the real Qwen3
// tokenizer, the streaming decoder, and load errors that name the file and field.
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/stream_decoder.h"
#include "text/tokenizer/utf8.h"
#include "tokenizer_fixture.h"

#include <filesystem>
#include <fstream>
#include <random>

namespace kapitsa::testing {
namespace {

using text::EncodeOptions;
using text::StreamDecoder;
using text::Tokenizer;

TEST(Tokenizer, GoldenEncodings) {
  const Tokenizer& tok = qwen3_tokenizer();
  ASSERT_EQ(qwen3_golden().size(), 180u);
  int failures = 0;
  for (const GoldenCase& c : qwen3_golden()) {
    const std::vector<int32_t> ids = tok.encode(c.text);
    EXPECT_EQ(ids, c.ids) << "text: " << Json(c.text).dump();
    failures += ids != c.ids;
  }
  EXPECT_EQ(failures, 0);
}

TEST(Tokenizer, GoldenEncodingsWithoutCache) {
  const Tokenizer& tok = qwen3_tokenizer();
  for (const GoldenCase& c : qwen3_golden()) EXPECT_EQ(tok.encode_uncached(c.text), c.ids) << Json(c.text).dump();
}

TEST(Tokenizer, GoldenDecodings) {
  const Tokenizer& tok = qwen3_tokenizer();
  for (const GoldenCase& c : qwen3_golden()) EXPECT_EQ(tok.decode(c.ids), c.decoded) << Json(c.text).dump();
}

TEST(Tokenizer, StreamingDecodeEqualsWholeDecode) {
  const Tokenizer& tok = qwen3_tokenizer();
  for (const GoldenCase& c : qwen3_golden()) {
    StreamDecoder stream(tok);
    std::string joined;
    for (int32_t id : c.ids) {
      const std::string piece = stream.push(id);
      ASSERT_TRUE(text::utf8_is_valid(piece)) << "half a character emitted for " << Json(c.text).dump();
      joined += piece;
    }
    EXPECT_EQ(stream.pending(), 0u);
    joined += stream.finish();
    EXPECT_EQ(joined, tok.decode(c.ids));
  }
}

TEST(Tokenizer, StreamingDecodeOfRandomIdsMatchesLossyDecode) {
  // Random ids include lone byte tokens, so the stream sees broken UTF-8: each chunk must still be
  // valid and the whole must equal decode() (which replaces invalid runs like HF's from_utf8_lossy).
  const Tokenizer& tok = qwen3_tokenizer();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> any_id(-5, tok.vocab_size() + 5), byte_token(0, 255);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids(rng() % 40);
    for (int32_t& id : ids) id = rng() % 3 ? byte_token(rng) : any_id(rng);
    StreamDecoder stream(tok);
    std::string joined;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      ASSERT_TRUE(text::utf8_is_valid(piece));
      joined += piece;
    }
    joined += stream.finish();
    EXPECT_TRUE(text::utf8_is_valid(joined));
    EXPECT_EQ(joined, tok.decode(ids));
  }
}

TEST(Tokenizer, Utf8LossyUsesMaximalSubparts) {
  // Rust's from_utf8_lossy: one U+FFFD per maximal invalid subpart.
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(text::utf8_lossy("a\xE2\x82" "b"), "a" + r + "b");         // truncated 3-byte sequence
  EXPECT_EQ(text::utf8_lossy("\xC0\xAF"), r + r);                      // overlong lead: each byte alone
  EXPECT_EQ(text::utf8_lossy("\xED\xA0\x80"), r + r + r);              // surrogate
  EXPECT_EQ(text::utf8_lossy("\xF0\x9F\x98"), r);                      // truncated emoji at the end
  EXPECT_EQ(text::utf8_lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80"); // complete emoji
}

TEST(Tokenizer, SpecialTokens) {
  const Tokenizer& tok = qwen3_tokenizer();
  EXPECT_EQ(tok.encode("<|im_start|>user"), (std::vector<int32_t>{151644, 872}));
  EncodeOptions plain;
  plain.allow_special = false;
  const auto as_text = tok.encode("<|im_start|>", plain);
  EXPECT_GT(as_text.size(), 1u);
  EXPECT_EQ(tok.decode(as_text), "<|im_start|>");
  // <think> is an added but not special token: still matched when specials are not allowed.
  EXPECT_EQ(tok.encode("<think>", plain), (std::vector<int32_t>{151667}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{151644, 872, 151645}, /*skip_special=*/true), "user");
  EXPECT_EQ(tok.eos_id(), std::optional<int32_t>(151645));
  EXPECT_TRUE(tok.is_special(151643));
  EXPECT_FALSE(tok.is_special(151667));
  EXPECT_EQ(tok.vocab_size(), 151669);
}

// Reads the Qwen3 tokenizer.json so tests can load variants of it.
const Json& qwen3_json() {
  static const Json j = *read_json_file(qwen3_dir() + "/tokenizer.json");
  return j;
}

TEST(Tokenizer, LegacyStringMergesGiveTheSameIds) {
  Json j = qwen3_json();
  Json merges = Json::array();
  for (const Json& m : j["model"]["merges"]) merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  j["model"]["merges"] = std::move(merges);
  auto tok = Tokenizer::from_json(j, Json(), "legacy");
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  for (size_t i = 0; i < qwen3_golden().size(); i += 7)
    EXPECT_EQ(tok->encode(qwen3_golden()[i].text), qwen3_golden()[i].ids);
}

TEST(Tokenizer, SplitRegexComesFromTheFile) {
  // Qwen3's regex keeps a run of letters in one piece; a file whose regex takes one letter per piece
  // must give one token per letter.
  const Tokenizer& qwen = qwen3_tokenizer();
  EXPECT_EQ(qwen.encode("hello").size(), 1u);
  Json j = qwen3_json();
  std::string pattern = j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"].get<std::string>();
  const std::string from = "\\p{L}+|\\p{N}|", to = "\\p{L}|\\p{N}|";
  const size_t at = pattern.find(from);
  ASSERT_NE(at, std::string::npos) << pattern;
  pattern.replace(at, from.size(), to);
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern;
  auto tok = Tokenizer::from_json(j, Json(), "variant");
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  const auto ids = tok->encode("hello");
  EXPECT_EQ(ids.size(), 5u);
  EXPECT_EQ(tok->decode(ids), "hello");
}

TEST(Tokenizer, NormalizesToNfc) {
  const Tokenizer& tok = qwen3_tokenizer();
  // "e" + combining acute (NFD) encodes like the precomposed "é".
  EXPECT_EQ(tok.encode("caf\x65\xCC\x81"), tok.encode("caf\xC3\xA9"));
}

TEST(Tokenizer, InvalidUtf8InputDoesNotFail) {
  const Tokenizer& tok = qwen3_tokenizer();
  const auto ids = tok.encode("ok \xFF\xFE bytes \xE2\x82");
  EXPECT_EQ(tok.decode(ids), "ok \xEF\xBF\xBD\xEF\xBF\xBD bytes \xEF\xBF\xBD");
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() / ("kapitsa_tok_" + std::to_string(fresh_seed()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(path_ / name, std::ios::binary) << content;
    return (path_ / name).string();
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

TEST(Tokenizer, LoadErrorsNameFileAndField) {
  TempDir dir;
  auto missing = Tokenizer::load(dir.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("tokenizer.json"), std::string::npos) << missing.error().message;

  dir.write("tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, ");
  auto malformed = Tokenizer::load(dir.path());
  ASSERT_FALSE(malformed.ok());
  EXPECT_NE(malformed.error().message.find("tokenizer.json"), std::string::npos);
  EXPECT_NE(malformed.error().message.find("malformed JSON"), std::string::npos) << malformed.error().message;

  dir.write("tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
  auto wordpiece = Tokenizer::load(dir.path());
  ASSERT_FALSE(wordpiece.ok());
  EXPECT_NE(wordpiece.error().message.find("model.type"), std::string::npos) << wordpiece.error().message;
  EXPECT_NE(wordpiece.error().message.find("WordPiece"), std::string::npos);

  dir.write("tokenizer.json",
            R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]},
                "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
                "decoder": {"type": "ByteLevel"}})");
  auto bad_merge = Tokenizer::load(dir.path());
  ASSERT_FALSE(bad_merge.ok());
  EXPECT_NE(bad_merge.error().message.find("merges[0]"), std::string::npos) << bad_merge.error().message;

  dir.write("tokenizer.json",
            R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"},
                "decoder": {"type": "ByteLevel"}})");
  auto bad_regex = Tokenizer::load(dir.path());
  ASSERT_FALSE(bad_regex.ok());
  EXPECT_NE(bad_regex.error().message.find("pre_tokenizer.pattern"), std::string::npos) << bad_regex.error().message;

  dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": "zero"}, "merges": []}})");
  auto bad_id = Tokenizer::load(dir.path());
  ASSERT_FALSE(bad_id.ok());
  EXPECT_NE(bad_id.error().message.find("model.vocab"), std::string::npos) << bad_id.error().message;
}

TEST(Tokenizer, SplitBehaviours) {
  // A tiny byte-level model whose vocabulary is every single byte, split on '-' with each behaviour.
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) {
    std::string c;
    text::append_utf8(text::byte_to_char(static_cast<unsigned char>(b)), c);
    vocab[c] = b;
  }
  auto pieces_with = [&](const char* behavior) {
    Json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}}},
              {"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}}},
              {"decoder", {{"type", "ByteLevel"}}}};
    auto pre = text::PreTokenizer::from_json(j["pre_tokenizer"], "test");
    EXPECT_TRUE(pre.ok());
    std::vector<std::string_view> out;
    pre->split("the-final--countdown", out);
    return std::vector<std::string>(out.begin(), out.end());
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces_with("Isolated"), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(pieces_with("Removed"), (V{"the", "final", "countdown"}));
  EXPECT_EQ(pieces_with("MergedWithPrevious"), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(pieces_with("MergedWithNext"), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(pieces_with("Contiguous"), (V{"the", "-", "final", "--", "countdown"}));
}

}  // namespace
}  // namespace kapitsa::testing
