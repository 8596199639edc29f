// The tokenizer.json "normalizer": none, NFC, NFD, NFKC, NFKD (utf8proc), Lowercase, or a Sequence
// of these. Byte-level BPE models (Qwen, Nemotron-H) use NFC or nothing. Anything else is a load error
// naming the field. Input must be valid UTF-8 (the tokenizer makes it so before normalizing).
#pragma once

#include "base/json.h"
#include "base/status.h"

#include <string>
#include <string_view>
#include <vector>

namespace kapitsa::text {

class Normalizer {
 public:
  enum class Step { nfc, nfd, nfkc, nfkd, lowercase };

  // `spec` is the "normalizer" value (may be null); `where` names file and field in errors.
  static Expected<Normalizer> from_json(const Json& spec, const std::string& where);

  bool empty() const { return steps_.empty(); }
  std::string apply(std::string_view text) const;

 private:
  std::vector<Step> steps_;
};

}  // namespace kapitsa::text
