// libFuzzer target: loading a tokenizer.json (it ships with a model, so it is untrusted input) — the
// model section (BPE vocab and merges), added tokens, normalizer, pre-tokenizer, decoder — then encoding
// and decoding a fixed sample with whatever loaded. Seeds: small hand-written tokenizer.json files.
#include "base/json.h"
#include "text/tokenizer/tokenizer.h"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto json = kapitsa::Json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  auto tok = kapitsa::text::Tokenizer::from_json(json, kapitsa::Json(), "tokenizer.json");
  if (!tok.ok()) {
    if (tok.error().message.empty()) std::abort();
    return 0;
  }
  for (const char* sample : {"Hello, world! 123 <|im_end|>\n\tdef f(x):", "\xff\xfe caf\xc3\xa9 \xe2\x82\xac"}) {
    const auto ids = tok->encode(sample);
    for (int32_t id : ids)
      if (id < 0 || id >= tok->vocab_size()) std::abort();
    (void)tok->decode(ids);
  }
  return 0;
}
