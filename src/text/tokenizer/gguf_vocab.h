// GgufVocab: the tokenizer a GGUF file carries in its tokenizer.ggml.* metadata (as llama.cpp's converter
// writes it), turned into the tokenizer.json and tokenizer_config.json a Tokenizer is built from. Only
// byte-level BPE ("gpt2") with the pre-tokenizers of the Qwen families ("qwen2", "qwen35") is read:
// their split regexes are the ones in the models' own tokenizer.json files (llama.cpp's llama-vocab.cpp
// quotes them). Vocabulary tokens (type 1) form the BPE vocabulary; control tokens (type 3) are special
// added tokens and user-defined ones (type 4) plain added tokens, as the converter sorted them from
// tokenizer.json's added_tokens. Knows no file format: the caller reads the metadata.
#pragma once

#include "base/json.h"
#include "base/status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kapitsa::text {

struct GgufVocab {
  std::string where;   // the file, for errors
  std::string model;   // tokenizer.ggml.model
  std::string pre;     // tokenizer.ggml.pre
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens, by id
  std::vector<int64_t> types;       // tokenizer.ggml.token_type, by id
  std::vector<std::string> merges;  // tokenizer.ggml.merges ("a b")
  std::optional<int64_t> bos, eos, pad;
  bool add_bos = false;
  std::optional<std::string> chat_template;  // tokenizer.chat_template
};

// {tokenizer.json, tokenizer_config.json} equivalents. Errors name the file and the key: another
// tokenizer model or pre-tokenizer, token types of another length, a special token id out of range.
Expected<std::pair<Json, Json>> gguf_tokenizer_json(const GgufVocab& v);

}  // namespace kapitsa::text
