// Stop-string matching across token boundaries and incremental detokenization (see text_stream.h).
#include "runtime/text_stream.h"

#include "text/tokenizer/tokenizer.h"

#include <algorithm>

namespace kapitsa::runtime {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));  // an empty stop string would match everywhere
}

StopMatcher::Result StopMatcher::push(std::string_view text) {
  Result result;
  if (stopped_) return result;
  held_.append(text);
  // The earliest match wins; among matches at the same place, the longest.
  size_t best = std::string::npos, best_len = 0;
  const std::string* best_stop = nullptr;
  for (const std::string& s : stops_) {
    const size_t at = held_.find(s);
    if (at != std::string::npos && (at < best || (at == best && s.size() > best_len))) {
      best = at;
      best_len = s.size();
      best_stop = &s;
    }
  }
  if (best_stop != nullptr) {
    result.text = held_.substr(0, best);
    result.stopped = true;
    result.matched = *best_stop;
    stopped_ = true;
    held_.clear();
    return result;
  }
  // Hold back the longest tail of held_ that is a proper prefix of some stop string. The stop
  // strings are valid UTF-8 and held_ holds whole characters, so the cut falls between characters.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > hold; --len)
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
  }
  result.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return result;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

TextStream::TextStream(const text::Tokenizer* tokenizer, std::vector<std::string> stops) : matcher_(std::move(stops)) {
  if (tokenizer != nullptr) decoder_.emplace(*tokenizer);
}

StopMatcher::Result TextStream::push(int32_t id) {
  if (!decoder_) return {};
  return matcher_.push(decoder_->push(id));
}

std::string TextStream::flush() {
  if (!decoder_) return {};
  StopMatcher::Result tail = matcher_.push(decoder_->finish());
  if (tail.stopped) return tail.text;
  return tail.text + matcher_.flush();
}

}  // namespace kapitsa::runtime
