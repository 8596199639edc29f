// The tokenizer, chat template and sampling defaults of a .gguf file, from its metadata
// (tokenizer.ggml.*, tokenizer.chat_template, general.sampling.*): what `kapitsa run/chat/serve
// --model file.gguf` use, so the file needs nothing next to it. Conversion rules: text/tokenizer/gguf_vocab.h.
#pragma once

#include "base/status.h"
#include "runtime/request.h"
#include "text/chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"

#include <optional>
#include <string>

namespace kapitsa::cli {

struct GgufText {
  text::Tokenizer tokenizer;
  std::optional<text::ChatTemplate> chat_template;  // absent when the file has none
  runtime::SamplingParams sampling;                  // general.sampling.{temp,top_k,top_p,min_p} over the defaults
};

// Errors name the file and the key (no tokenizer metadata, an unsupported tokenizer model or pre-tokenizer).
Expected<GgufText> load_gguf_text(const std::string& path);

}  // namespace kapitsa::cli
