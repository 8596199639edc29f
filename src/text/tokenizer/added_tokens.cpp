// Added-token matching: a first-byte table narrows candidates; at the first position with any match the
// longest candidate wins.
#include "text/tokenizer/added_tokens.h"

#include "text/tokenizer/json_fields.h"

#include <utf8proc.h>

#include <algorithm>

namespace kapitsa::text {
namespace {

bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Whether the code point ending just before `pos` (backward) / starting at `pos` (forward) is a letter or digit.
bool word_char_at(std::string_view text, size_t pos) {
  utf8proc_int32_t c = -1;
  utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + pos),
                   static_cast<utf8proc_ssize_t>(text.size() - pos), &c);
  if (c < 0) return false;
  const auto cat = utf8proc_category(c);
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}
bool word_char_before(std::string_view text, size_t pos) {
  if (pos == 0) return false;
  size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return word_char_at(text.substr(0, pos), start);
}

}  // namespace

Expected<std::vector<AddedToken>> AddedTokenMatcher::parse(const Json& list, const std::string& where) {
  std::vector<AddedToken> tokens;
  if (list.is_null()) return tokens;
  if (!list.is_array()) return error("{}: expected an array", where);
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& t = list[i];
    const std::string field = fmt::format("{}[{}]", where, i);
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
        t["id"].get<int64_t>() > (1 << 24))
      return error("{}.id: expected a non-negative integer", field);
    if (!t.contains("content") || !t["content"].is_string() || t["content"].get<std::string>().empty())
      return error("{}.content: expected a non-empty string", field);
    AddedToken a;
    a.id = t["id"].get<int32_t>();
    a.content = t["content"].get<std::string>();
    a.special = detail::json_bool(t, "special", false);
    a.lstrip = detail::json_bool(t, "lstrip", false);
    a.rstrip = detail::json_bool(t, "rstrip", false);
    a.single_word = detail::json_bool(t, "single_word", false);
    a.normalized = detail::json_bool(t, "normalized", !a.special);
    tokens.push_back(std::move(a));
  }
  return tokens;
}

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (uint32_t i = 0; i < tokens_.size(); ++i)
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  for (auto& list : by_first_byte_)
    std::stable_sort(list.begin(), list.end(),
                     [&](uint32_t a, uint32_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
}

bool AddedTokenMatcher::find(std::string_view text, size_t from, bool allow_special, Match& match) const {
  if (tokens_.empty()) return false;
  for (size_t i = from; i < text.size(); ++i) {
    const auto& candidates = by_first_byte_[static_cast<unsigned char>(text[i])];
    for (uint32_t k : candidates) {
      const AddedToken& t = tokens_[k];
      if (t.special && !allow_special) continue;
      if (text.compare(i, t.content.size(), t.content) != 0) continue;
      size_t start = i, end = i + t.content.size();
      if (t.single_word && (word_char_before(text, start) || (end < text.size() && word_char_at(text, end))))
        continue;
      if (t.lstrip)
        while (start > from && is_space(static_cast<unsigned char>(text[start - 1]))) --start;
      if (t.rstrip)
        while (end < text.size() && is_space(static_cast<unsigned char>(text[end]))) ++end;
      match = {start, end, t.id};
      return true;
    }
  }
  return false;
}

}  // namespace kapitsa::text
