// GGUF tokenizer metadata → tokenizer.json (see gguf_vocab.h).
#include "text/tokenizer/gguf_vocab.h"

namespace kapitsa::text {
namespace {

// The Split regex of each pre-tokenizer name, as in the models' tokenizer.json.
std::optional<std::string> split_regex(const std::string& pre) {
  if (pre == "qwen2" || pre == "deepseek-r1-qwen")
    return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (pre == "qwen35")
    return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  return std::nullopt;
}

Json byte_level() {
  return Json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
}

}  // namespace

Expected<std::pair<Json, Json>> gguf_tokenizer_json(const GgufVocab& v) {
  if (v.model != "gpt2")
    return error("{}: tokenizer.ggml.model is '{}'; Kapitsa reads only byte-level BPE ('gpt2') from GGUF metadata — put "
                 "the model's tokenizer.json next to the file",
                 v.where, v.model);
  const std::optional<std::string> regex = split_regex(v.pre);
  if (!regex)
    return error("{}: tokenizer.ggml.pre is '{}'; Kapitsa knows the pre-tokenizers 'qwen2' and 'qwen35' — put the "
                 "model's tokenizer.json next to the file",
                 v.where, v.pre);
  if (v.types.size() != v.tokens.size())
    return error("{}: tokenizer.ggml.token_type has {} entries for {} tokens", v.where, v.types.size(), v.tokens.size());
  if (v.add_bos)  // the ByteLevel post-processor below adds nothing; Qwen's files say false
    return error("{}: tokenizer.ggml.add_bos_token is true, which Kapitsa does not follow from GGUF metadata yet", v.where);
  const int64_t n = static_cast<int64_t>(v.tokens.size());
  for (const auto& [key, id] : {std::pair{"bos", v.bos}, std::pair{"eos", v.eos}, std::pair{"padding", v.pad}})
    if (id && (*id < 0 || *id >= n))
      return error("{}: tokenizer.ggml.{}_token_id {} is not a token id (0..{})", v.where, key, *id, n - 1);

  Json vocab = Json::object(), added = Json::array();
  for (int64_t id = 0; id < n; ++id) {
    const int64_t type = v.types[static_cast<size_t>(id)];
    const std::string& token = v.tokens[static_cast<size_t>(id)];
    if (type == 3 || type == 4)  // control / user-defined: added tokens, matched in the raw text
      added.push_back(Json{{"id", id}, {"content", token}, {"single_word", false}, {"lstrip", false},
                           {"rstrip", false}, {"normalized", false}, {"special", type == 3}});
    else if (type != 5)  // 5: unused
      vocab[token] = id;
  }
  Json tokenizer = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", Json{{"type", "NFC"}}},
      {"pre_tokenizer",
       Json{{"type", "Sequence"},
            {"pretokenizers", Json::array({Json{{"type", "Split"}, {"pattern", Json{{"Regex", *regex}}},
                                                {"behavior", "Isolated"}, {"invert", false}},
                                           byte_level()})}}},
      {"post_processor", byte_level()},
      {"decoder", byte_level()},
      {"model", Json{{"type", "BPE"}, {"vocab", vocab}, {"merges", v.merges}, {"byte_fallback", false},
                     {"ignore_merges", false}}},
  };
  Json config = {{"add_bos_token", v.add_bos}};
  if (v.bos) config["bos_token"] = v.tokens[static_cast<size_t>(*v.bos)];
  if (v.eos) config["eos_token"] = v.tokens[static_cast<size_t>(*v.eos)];
  if (v.pad) config["pad_token"] = v.tokens[static_cast<size_t>(*v.pad)];
  if (v.chat_template) config["chat_template"] = *v.chat_template;
  return std::pair{std::move(tokenizer), std::move(config)};
}

}  // namespace kapitsa::text
