// Tokenizer, chat template and sampling defaults from GGUF metadata (see gguf_text.h).
#include "cli/gguf_text.h"

#include "text/tokenizer/gguf_vocab.h"
#include "weights/gguf.h"

namespace kapitsa::cli {
namespace {

std::optional<int64_t> optional_int(const weights::GgufFile& f, const std::string& key) {
  const weights::GgufValue* v = f.find(key);
  return v != nullptr && v->is_integer() ? std::optional<int64_t>(v->i) : std::nullopt;
}

std::optional<double> optional_number(const weights::GgufFile& f, const std::string& key) {
  const weights::GgufValue* v = f.find(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_integer()) return static_cast<double>(v->i);
  return v->is_float() ? std::optional<double>(v->f) : std::nullopt;
}

}  // namespace

Expected<GgufText> load_gguf_text(const std::string& path) {
  KAPITSA_TRY(auto parts, weights::open_gguf_parts(path));
  const weights::GgufFile& f = *parts[0];  // part 1 holds the metadata
  if (f.find("tokenizer.ggml.model") == nullptr)
    return error("{}: no tokenizer in the GGUF metadata (tokenizer.ggml.model is missing)", f.path());
  text::GgufVocab v;
  v.where = f.path();
  KAPITSA_TRY(v.model, f.get_string("tokenizer.ggml.model"));
  KAPITSA_TRY(v.pre, f.get_string("tokenizer.ggml.pre"));
  const weights::GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  const weights::GgufValue* types = f.find("tokenizer.ggml.token_type");
  const weights::GgufValue* merges = f.find("tokenizer.ggml.merges");
  if (tokens == nullptr || tokens->element != weights::GgufValueType::string)
    return error("{}: metadata 'tokenizer.ggml.tokens' is missing or not a string array", f.path());
  if (merges == nullptr || merges->element != weights::GgufValueType::string)
    return error("{}: metadata 'tokenizer.ggml.merges' is missing or not a string array", f.path());
  v.tokens = tokens->strings;
  v.merges = merges->strings;
  if (types != nullptr) v.types = types->ints;
  else v.types.assign(v.tokens.size(), 1);
  v.bos = optional_int(f, "tokenizer.ggml.bos_token_id");
  v.eos = optional_int(f, "tokenizer.ggml.eos_token_id");
  v.pad = optional_int(f, "tokenizer.ggml.padding_token_id");
  if (const weights::GgufValue* b = f.find("tokenizer.ggml.add_bos_token")) v.add_bos = b->i != 0;
  if (f.find("tokenizer.chat_template")) {
    KAPITSA_TRY(v.chat_template, f.get_string("tokenizer.chat_template"));
  }
  KAPITSA_TRY(auto json, text::gguf_tokenizer_json(v));
  const auto& [tokenizer_json, config] = json;
  KAPITSA_TRY(text::Tokenizer tokenizer, text::Tokenizer::from_json(tokenizer_json, config, f.path() + ": tokenizer.ggml"));
  GgufText out{std::move(tokenizer), std::nullopt, {}};
  if (v.chat_template) {
    KAPITSA_TRY(text::ChatTemplate t, text::ChatTemplate::from_source(*v.chat_template, f.path() + ": tokenizer.chat_template"));
    text::OrderedJson specials = text::OrderedJson::object();
    for (const char* key : {"bos_token", "eos_token", "pad_token"})
      if (config.contains(key)) specials[key] = config[key].get<std::string>();
    t.set_default_variables(std::move(specials));
    out.chat_template.emplace(std::move(t));
  }
  if (auto t = optional_number(f, "general.sampling.temp")) out.sampling.temperature = static_cast<float>(*t);
  if (auto k = optional_int(f, "general.sampling.top_k")) out.sampling.top_k = static_cast<int>(*k);
  if (auto p = optional_number(f, "general.sampling.top_p")) out.sampling.top_p = static_cast<float>(*p);
  if (auto m = optional_number(f, "general.sampling.min_p")) out.sampling.min_p = static_cast<float>(*m);
  return out;
}

}  // namespace kapitsa::cli
