// Tokenizer: a Hugging Face tokenizer.json (byte-level BPE: Qwen, Nemotron-H) + tokenizer_config.json.
// encode: added tokens split out of the raw text first, then each gap is normalized, pre-tokenized and
// BPE-encoded; decode: ids → bytes (ByteLevel decoder) → UTF-8, invalid runs as U+FFFD exactly as HF's
// from_utf8_lossy. Immutable after loading and safe to share between threads.
#pragma once

#include "base/json.h"
#include "base/status.h"
#include "text/tokenizer/added_tokens.h"
#include "text/tokenizer/bpe.h"
#include "text/tokenizer/normalizer.h"
#include "text/tokenizer/pretokenizer.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kapitsa::text {

struct EncodeOptions {
  // Match special added tokens (<|im_start|>) in the text; false treats them as plain text (user input).
  bool allow_special = true;
  // Apply the post-processor (e.g. a BOS the model expects). HF's default is true; the engine encodes
  // rendered chat prompts, which already hold their specials, with false.
  bool add_special = false;
};

class Tokenizer {
 public:
  // Loads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json.
  static Expected<Tokenizer> load(const std::string& dir);
  // From parsed files; `config` may be null. `where` names the tokenizer.json in errors.
  static Expected<Tokenizer> from_json(const Json& tokenizer_json, const Json& config, const std::string& where);

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Where the text splits at an added token: the bytes the match covers and the index of its id in
  // the result. The ids before `index` are exactly those of text[0, start) encoded alone (added tokens
  // are split out before anything else), which lets a caller re-encode only a changed tail.
  struct Split {
    size_t start = 0, end = 0, index = 0;
  };
  // encode, also listing the splits (none when the text is not valid UTF-8: offsets would not hold).
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options, std::vector<Split>* splits) const;
  // Encodes without the per-piece cache (to benchmark the BPE itself).
  std::vector<int32_t> encode_uncached(std::string_view text, const EncodeOptions& options = {}) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Raw bytes of one token appended to `out` (may be part of a UTF-8 character); false for an id that
  // is not in the vocabulary, or a special token when skip_special.
  bool append_token_bytes(int32_t id, std::string& out, bool skip_special = false) const;

  // The id of a token given as written in the vocabulary ("Ġthe") or as an added token ("<|im_end|>").
  std::optional<int32_t> token_id(std::string_view token) const;
  // The token string as stored (ByteLevel form for vocabulary tokens); empty when unknown.
  std::string token_string(int32_t id) const;
  int32_t vocab_size() const { return vocab_size_; }  // max id + 1
  bool is_special(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const { return added_.tokens(); }

  // From tokenizer_config.json (bos_token / eos_token / pad_token), when they name known tokens.
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  std::optional<int32_t> pad_id() const { return pad_id_; }
  const Json& config() const { return config_; }

  void clear_cache() const { bpe_.clear_cache(); }

 private:
  std::vector<int32_t> encode_impl(std::string_view text, const EncodeOptions& options, bool cached,
                                   std::vector<Split>* splits = nullptr) const;
  void encode_segment(std::string_view segment, std::vector<int32_t>& out, bool cached) const;

  Normalizer normalizer_;
  PreTokenizer pretokenizer_;
  Bpe bpe_;
  AddedTokenMatcher added_;
  std::vector<int32_t> added_by_id_;   // id → index into added_.tokens(), −1 when not added
  std::vector<int32_t> prefix_ids_;    // post-processor template around the sequence
  std::vector<int32_t> suffix_ids_;
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_, eos_id_, pad_id_;
  Json config_;
};

}  // namespace kapitsa::text
