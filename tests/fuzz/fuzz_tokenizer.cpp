// libFuzzer target: encoding any bytes with the real Qwen3 tokenizer (tests/text/data/qwen3), with and
// without special-token matching, and decoding the ids back — whole and streamed token by token, which
// must agree. Invalid UTF-8, lone surrogates' bytes and added-token fragments are the interesting inputs.
#include "fuzz_common.h"
#include "text/tokenizer/stream_decoder.h"
#include "text/tokenizer/tokenizer.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {

const kapitsa::text::Tokenizer& tokenizer() {
  static const kapitsa::text::Tokenizer* tok = [] {
    auto t = kapitsa::text::Tokenizer::load(kapitsa::fuzz::data_path("text/data/qwen3"));
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.error().message.c_str());
      std::abort();
    }
    return new kapitsa::text::Tokenizer(std::move(t).value());
  }();
  return *tok;
}

}  // namespace

// Loads the data before fuzzing starts: a first load under the sanitizers takes seconds, which would
// count against the first input's timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto& tok = tokenizer();
  kapitsa::text::EncodeOptions options;
  options.allow_special = data[0] & 1;
  options.add_special = data[0] & 2;
  const auto ids = tok.encode(text, options);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) std::abort();
  kapitsa::text::StreamDecoder stream(tok);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.finish();
  if (streamed != tok.decode(ids)) std::abort();
  return 0;
}
