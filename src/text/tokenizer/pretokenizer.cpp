// Pre-tokenization with PCRE2. A Split step marks pattern matches in each piece and regroups
// matches and gaps by its behaviour, like Hugging Face's SplitDelimiterBehavior. Empty matches are
// skipped, as HF does.
#include "text/tokenizer/pretokenizer.h"

#include "text/tokenizer/json_fields.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

namespace kapitsa::text {

// GPT-2's pattern, used by ByteLevel when use_regex is true.
static constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

namespace {

std::string escape_literal(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

Status PreTokenizer::add_steps(const Json& spec, const std::string& where, PreTokenizer& p, bool first) {
  if (spec.is_null()) return ok_status();
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    return error("{}: expected an object with a \"type\"", where);
  const std::string type = spec["type"].get<std::string>();
  auto compile = [&](const std::string& pattern, const std::string& field) -> Expected<std::shared_ptr<const Regex>> {
    int code = 0;
    PCRE2_SIZE offset = 0;
    auto regex = std::make_shared<Regex>();
    regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
    if (!regex->code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(code, message, sizeof(message));
      return error("{}: regex does not compile at offset {}: {}", field, offset, reinterpret_cast<char*>(message));
    }
    pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);  // best effort: the interpreter is the fallback
    return std::shared_ptr<const Regex>(std::move(regex));
  };

  if (type == "Sequence") {
    if (!spec.contains("pretokenizers") || !spec["pretokenizers"].is_array())
      return error("{}.pretokenizers: expected an array", where);
    const Json& list = spec["pretokenizers"];
    for (size_t i = 0; i < list.size(); ++i)
      KAPITSA_RETURN_IF_ERROR(add_steps(list[i], fmt::format("{}.pretokenizers[{}]", where, i), p, first && i == 0));
    return ok_status();
  }
  if (type == "Split") {
    Step step;
    const Json pattern = spec.contains("pattern") ? spec["pattern"] : Json();
    std::string regex_text;
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      regex_text = pattern["Regex"].get<std::string>();
    } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
      regex_text = escape_literal(pattern["String"].get<std::string>());
    } else {
      return error("{}.pattern: expected {{\"Regex\": ...}} or {{\"String\": ...}}", where);
    }
    KAPITSA_TRY(step.regex, compile(regex_text, where + ".pattern"));
    const std::string behavior = detail::json_string(spec, "behavior", "Isolated");
    if (behavior == "Isolated") step.behavior = Behavior::isolated;
    else if (behavior == "Removed") step.behavior = Behavior::removed;
    else if (behavior == "MergedWithPrevious") step.behavior = Behavior::merged_with_previous;
    else if (behavior == "MergedWithNext") step.behavior = Behavior::merged_with_next;
    else if (behavior == "Contiguous") step.behavior = Behavior::contiguous;
    else return error("{}.behavior: unsupported value \"{}\"", where, behavior);
    step.invert = detail::json_bool(spec, "invert", false);
    p.steps_.push_back(std::move(step));
    return ok_status();
  }
  if (type == "ByteLevel") {
    p.byte_level_ = true;
    if (detail::json_bool(spec, "add_prefix_space", false)) {
      // HF prepends the space to every piece reaching ByteLevel; we support the usual case where ByteLevel
      // comes first and so sees the whole segment.
      if (!first) return error("{}.add_prefix_space: only supported when ByteLevel is the first pre-tokenizer", where);
      p.add_prefix_space_ = true;
    }
    if (detail::json_bool(spec, "use_regex", true)) {
      Step step;
      KAPITSA_TRY(step.regex, compile(std::string(kGpt2Pattern), where));
      p.steps_.push_back(std::move(step));
    }
    return ok_status();
  }
  return error("{}: unsupported pre-tokenizer type \"{}\"", where, type);
}

Expected<PreTokenizer> PreTokenizer::from_json(const Json& spec, const std::string& where) {
  PreTokenizer p;
  KAPITSA_RETURN_IF_ERROR(add_steps(spec, where, p, true));
  return p;
}

void PreTokenizer::apply(const Step& step, std::string_view piece, std::vector<std::string_view>& out) {
  // Collect [start, end) of every non-empty match.
  struct Span {
    size_t start, end;
    bool match;
  };
  std::vector<Span> spans;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(step.regex->code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
  size_t offset = 0, last = 0;
  while (offset < piece.size()) {
    int rc = pcre2_match(step.regex->code, subject, piece.size(), offset, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)  // JIT stack exhausted or similar: retry interpreted
      rc = pcre2_match(step.regex->code, subject, piece.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(),
                       nullptr);
    if (rc < 0) break;  // no more matches (or a limit hit: the rest stays one gap)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t start = ov[0], end = ov[1];
    if (end <= start) {  // empty match: step over one character
      offset = start + 1;
      while (offset < piece.size() && (static_cast<unsigned char>(piece[offset]) & 0xC0) == 0x80) ++offset;
      continue;
    }
    if (start > last) spans.push_back({last, start, false});
    spans.push_back({start, end, true});
    last = offset = end;
  }
  if (last < piece.size()) spans.push_back({last, piece.size(), false});
  if (step.invert)
    for (Span& s : spans) s.match = !s.match;

  // Regroup, as HF's SplitDelimiterBehavior does. `pieces` holds [start, end) pairs.
  std::vector<std::pair<size_t, size_t>> pieces;
  bool previous_match = false;
  switch (step.behavior) {
    case Behavior::isolated:
      for (const Span& s : spans) pieces.push_back({s.start, s.end});
      break;
    case Behavior::removed:
      for (const Span& s : spans)
        if (!s.match) pieces.push_back({s.start, s.end});
      break;
    case Behavior::merged_with_previous:  // a match joins the piece before it
      for (const Span& s : spans) {
        if (s.match && !previous_match && !pieces.empty()) pieces.back().second = s.end;
        else pieces.push_back({s.start, s.end});
        previous_match = s.match;
      }
      break;
    case Behavior::merged_with_next:  // a match joins the piece after it: the same, walking backwards
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& s = spans[i];
        if (s.match && !previous_match && !pieces.empty()) pieces.back().first = s.start;
        else pieces.push_back({s.start, s.end});
        previous_match = s.match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    case Behavior::contiguous:  // runs of matches (and of gaps) become one piece
      for (const Span& s : spans) {
        if (s.match == previous_match && !pieces.empty()) pieces.back().second = s.end;
        else pieces.push_back({s.start, s.end});
        previous_match = s.match;
      }
      break;
  }
  for (const auto& [a, b] : pieces)
    if (b > a) out.push_back(piece.substr(a, b - a));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  std::vector<std::string_view> pieces{text}, next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string_view piece : pieces) apply(step, piece, next);
    pieces.swap(next);
  }
  out.insert(out.end(), pieces.begin(), pieces.end());
}

}  // namespace kapitsa::text
