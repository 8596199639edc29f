// Loading tokenizer.json into the pipeline parts and running encode / decode over them.
#include "text/tokenizer/tokenizer.h"

#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/json_fields.h"
#include "text/tokenizer/utf8.h"

#include <filesystem>

namespace kapitsa::text {
namespace {

// The post-processor's "single" template as ids before and after the sequence. ByteLevel is a no-op
// for ids; Roberta/Bert processors are not used by byte-level BPE chat models.
Status parse_post_processor(const Json& spec, const std::string& where, const Tokenizer& tok,
                            std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
  if (spec.is_null()) return ok_status();
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    return error("{}: expected an object with a \"type\"", where);
  const std::string type = spec["type"].get<std::string>();
  if (type == "ByteLevel") return ok_status();
  if (type == "Sequence") {
    if (!spec.contains("processors") || !spec["processors"].is_array())
      return error("{}.processors: expected an array", where);
    for (size_t i = 0; i < spec["processors"].size(); ++i)
      KAPITSA_RETURN_IF_ERROR(parse_post_processor(spec["processors"][i], fmt::format("{}.processors[{}]", where, i),
                                                   tok, prefix, suffix));
    return ok_status();
  }
  if (type != "TemplateProcessing") return error("{}: unsupported post-processor type \"{}\"", where, type);
  if (!spec.contains("single") || !spec["single"].is_array()) return error("{}.single: expected an array", where);
  const Json specials = spec.contains("special_tokens") ? spec["special_tokens"] : Json::object();
  bool after_sequence = false;
  for (size_t i = 0; i < spec["single"].size(); ++i) {
    const Json& piece = spec["single"][i];
    const std::string field = fmt::format("{}.single[{}]", where, i);
    if (piece.is_object() && piece.contains("Sequence")) {
      after_sequence = true;
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken") || !piece["SpecialToken"].is_object())
      return error("{}: expected {{\"Sequence\": ...}} or {{\"SpecialToken\": ...}}", field);
    const std::string name = detail::json_string(piece["SpecialToken"], "id", "");
    std::vector<int32_t> ids;
    if (specials.is_object() && specials.contains(name) && specials[name].contains("ids") &&
        specials[name]["ids"].is_array()) {
      for (const Json& id : specials[name]["ids"]) {
        if (!id.is_number_integer()) return error("{}.special_tokens[\"{}\"].ids: expected integers", where, name);
        ids.push_back(id.get<int32_t>());
      }
    } else if (auto id = tok.token_id(name)) {
      ids.push_back(*id);
    } else {
      return error("{}: special token \"{}\" is unknown", field, name);
    }
    (after_sequence ? suffix : prefix).insert((after_sequence ? suffix : prefix).end(), ids.begin(), ids.end());
  }
  return ok_status();
}

// tokenizer_config.json names tokens as strings or as {"content": "..."} objects.
std::optional<int32_t> config_token(const Json& config, const char* key, const Tokenizer& tok) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const Json& v = config[key];
  std::string name;
  if (v.is_string()) name = v.get<std::string>();
  else if (v.is_object() && v.contains("content") && v["content"].is_string()) name = v["content"].get<std::string>();
  else return std::nullopt;
  return tok.token_id(name);
}

}  // namespace

Expected<Tokenizer> Tokenizer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "tokenizer.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return error("{}: no tokenizer.json in this folder", path);
  KAPITSA_TRY(Json tokenizer_json, read_json_file(path));
  Json config;
  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  if (fs::exists(config_path, ec)) {
    KAPITSA_TRY(config, read_json_file(config_path));
  }
  return from_json(tokenizer_json, config, path);
}

Expected<Tokenizer> Tokenizer::from_json(const Json& j, const Json& config, const std::string& where) {
  try {
    if (!j.is_object()) return error("{}: expected a JSON object at the top level", where);
    Tokenizer tok;
    if (!j.contains("model")) return error("{}: missing field \"model\"", where);
    KAPITSA_TRY(tok.bpe_, Bpe::from_json(j["model"], where));
    KAPITSA_TRY(tok.normalizer_, Normalizer::from_json(j.contains("normalizer") ? j["normalizer"] : Json(),
                                                       where + ": normalizer"));
    KAPITSA_TRY(tok.pretokenizer_, PreTokenizer::from_json(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : Json(),
                                                           where + ": pre_tokenizer"));
    const Json decoder = j.contains("decoder") ? j["decoder"] : Json();
    if (!decoder.is_null() && detail::json_string(decoder, "type", "") != "ByteLevel")
      return error("{}: decoder: unsupported type \"{}\" (only ByteLevel)", where,
                   detail::json_string(decoder, "type", "?"));
    if (!tok.pretokenizer_.byte_level() && detail::json_string(decoder, "type", "") != "ByteLevel")
      return error("{}: pre_tokenizer: no ByteLevel step (only byte-level BPE is supported)", where);

    KAPITSA_TRY(std::vector<AddedToken> added,
                AddedTokenMatcher::parse(j.contains("added_tokens") ? j["added_tokens"] : Json(), where + ": added_tokens"));
    tok.vocab_size_ = tok.bpe_.max_id() + 1;
    for (const AddedToken& a : added) tok.vocab_size_ = std::max(tok.vocab_size_, a.id + 1);
    tok.added_by_id_.assign(tok.vocab_size_, -1);
    for (size_t i = 0; i < added.size(); ++i) tok.added_by_id_[added[i].id] = static_cast<int32_t>(i);
    tok.added_ = AddedTokenMatcher(std::move(added));

    KAPITSA_RETURN_IF_ERROR(parse_post_processor(j.contains("post_processor") ? j["post_processor"] : Json(),
                                                 where + ": post_processor", tok, tok.prefix_ids_, tok.suffix_ids_));
    tok.config_ = config.is_object() ? config : Json::object();
    tok.bos_id_ = config_token(tok.config_, "bos_token", tok);
    tok.eos_id_ = config_token(tok.config_, "eos_token", tok);
    tok.pad_id_ = config_token(tok.config_, "pad_token", tok);
    return tok;
  } catch (const Json::exception& e) {
    return error("{}: unexpected JSON structure: {}", where, e.what());
  }
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  for (const AddedToken& a : added_.tokens())
    if (a.content == token) return a.id;
  auto it = bpe_.vocab().find(token);
  if (it != bpe_.vocab().end()) return it->second;
  return std::nullopt;
}

std::string Tokenizer::token_string(int32_t id) const {
  if (id >= 0 && id < vocab_size_ && added_by_id_[id] >= 0) return added_.tokens()[added_by_id_[id]].content;
  const std::string* t = bpe_.token(id);
  return t ? *t : std::string();
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size_ && added_by_id_[id] >= 0 && added_.tokens()[added_by_id_[id]].special;
}

void Tokenizer::encode_segment(std::string_view segment, std::vector<int32_t>& out, bool cached) const {
  if (segment.empty()) return;
  std::string normalized;
  if (!normalizer_.empty()) {
    normalized = normalizer_.apply(segment);
    segment = normalized;
  }
  if (pretokenizer_.add_prefix_space() && segment[0] != ' ') {
    normalized = " " + std::string(segment);
    segment = normalized;
  }
  thread_local std::vector<std::string_view> pieces;
  pieces.clear();
  pretokenizer_.split(segment, pieces);
  for (std::string_view piece : pieces) {
    if (cached) bpe_.encode(piece, out);
    else bpe_.encode_uncached(piece, out);
  }
}

std::vector<int32_t> Tokenizer::encode_impl(std::string_view text, const EncodeOptions& options, bool cached,
                                            std::vector<Split>* splits) const {
  // PCRE2 and utf8proc need valid UTF-8; invalid runs become U+FFFD (what a Rust String would hold).
  std::string repaired;
  if (splits) splits->clear();
  if (!utf8_is_valid(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
    splits = nullptr;  // offsets into the repaired text would not be the caller's
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  if (options.add_special) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
  size_t pos = 0;
  AddedTokenMatcher::Match m;
  while (added_.find(text, pos, options.allow_special, m)) {
    encode_segment(text.substr(pos, m.start - pos), ids, cached);
    if (splits) splits->push_back({m.start, m.end, ids.size()});
    ids.push_back(m.id);
    pos = m.end;
  }
  encode_segment(text.substr(pos), ids, cached);
  if (options.add_special) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  return encode_impl(text, options, true);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options, std::vector<Split>* splits) const {
  return encode_impl(text, options, true, splits);
}

std::vector<int32_t> Tokenizer::encode_uncached(std::string_view text, const EncodeOptions& options) const {
  return encode_impl(text, options, false);
}

bool Tokenizer::append_token_bytes(int32_t id, std::string& out, bool skip_special) const {
  if (id >= 0 && id < vocab_size_ && added_by_id_[id] >= 0) {
    const AddedToken& a = added_.tokens()[added_by_id_[id]];
    if (skip_special && a.special) return false;
    // HF runs added tokens through the ByteLevel decoder too (a no-op for ASCII-printable content).
    mapped_to_bytes(a.content, out);
    return true;
  }
  const std::string* t = bpe_.token(id);
  if (!t) return false;
  mapped_to_bytes(*t, out);
  return true;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (int32_t id : ids) append_token_bytes(id, bytes, skip_special);
  return utf8_is_valid(bytes) ? bytes : utf8_lossy(bytes);
}

}  // namespace kapitsa::text
