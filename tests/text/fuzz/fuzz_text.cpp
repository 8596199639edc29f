// libFuzzer target for the tokenizer and the output parsers (not part of ctest). Build and run:
//   clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -I src tests/text/fuzz/fuzz_text.cpp \
//     src/text/tokenizer/*.cpp src/text/parse/*.cpp src/base/json.cpp -lfmt -lpcre2-8 -lutf8proc -o fuzz_text
//   KAPITSA_TOKENIZER_DIR=tests/text/data/qwen3 ./fuzz_text -max_total_time=60
// The first input byte picks the parser configuration; the rest is the text, also cut into chunks.
#include "text/parse/output_parser.h"
#include "text/tokenizer/stream_decoder.h"
#include "text/tokenizer/tokenizer.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {

const kapitsa::text::Tokenizer* tokenizer() {
  static const kapitsa::text::Tokenizer* tok = [] () -> const kapitsa::text::Tokenizer* {
    const char* dir = std::getenv("KAPITSA_TOKENIZER_DIR");
    if (!dir) return nullptr;
    auto t = kapitsa::text::Tokenizer::load(dir);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.error().message.c_str());
      std::abort();
    }
    return new kapitsa::text::Tokenizer(std::move(t).value());
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t config = data[0];
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);

  if (const auto* tok = tokenizer()) {
    const auto ids = tok->encode(input);
    kapitsa::text::StreamDecoder stream(*tok);
    std::string joined;
    for (int32_t id : ids) joined += stream.push(id);
    joined += stream.finish();
    if (joined != tok->decode(ids)) std::abort();
  }

  kapitsa::text::ParserOptions options;
  options.reasoning = config & 1;
  options.starts_in_reasoning = config & 2;
  options.tools = static_cast<kapitsa::text::ToolFormat>((config >> 2) & 3);
  kapitsa::text::OutputParser parser(options);
  const size_t step = 1 + (config >> 4);
  for (size_t at = 0; at < input.size(); at += step) parser.feed(input.substr(at, step));
  parser.finish();
  return 0;
}
