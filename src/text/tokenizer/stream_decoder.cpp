// Incremental lossy UTF-8 over the token byte stream (see utf8.h for the rule that keeps it identical
// to a whole decode).
#include "text/tokenizer/stream_decoder.h"

#include "text/tokenizer/utf8.h"

namespace kapitsa::text {

std::string StreamDecoder::push(int32_t id) {
  if (!tokenizer_->append_token_bytes(id, pending_, skip_special_)) return {};
  std::string out;
  const size_t used = utf8_append_lossy(pending_, out, false);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  utf8_append_lossy(pending_, out, true);
  pending_.clear();
  return out;
}

}  // namespace kapitsa::text
