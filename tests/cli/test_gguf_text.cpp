// The tokenizer and chat template read from GGUF metadata (cli/gguf_text.h) against the ones read from
// tokenizer.json / tokenizer_config.json: tests/fixtures/gguf/demo-vocab.gguf is llama.cpp's converter
// run on models/demo/target with --vocab-only (tools/gguf/make_test_files.sh), so its tokenizer.ggml.*
// keys are written by the converter's own vocabulary code from the demo's tokenizer.json. Same ids for
// text with specials, code, digits, CJK, emoji and combining marks; same decoding; same chat prompt.
#include "cli/gguf_text.h"
#include "test_util.h"
#include "text/chat/messages.h"

#include <gtest/gtest.h>

namespace kapitsa::testing {
namespace {

TEST(GgufText, TokenizerAndTemplateMatchTheTokenizerJson) {
  auto gguf = cli::load_gguf_text(test_data_path("fixtures/gguf/demo-vocab.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.error().message;
  auto folder = text::Tokenizer::load(test_data_path("../models/demo/target"));
  ASSERT_TRUE(folder.ok()) << folder.error().message;
  EXPECT_EQ(gguf->tokenizer.vocab_size(), folder->vocab_size());
  EXPECT_EQ(gguf->tokenizer.eos_id(), folder->eos_id());
  const std::vector<std::string> texts = {
      "Hello, world! It's 2026 and we're testing 12345 tokens.",
      "<|im_start|>user\nWhat is 7 × 8?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n56",
      "def f(x):\n    return x ** 2  # squared\n\n\n\tindent",
      "日本語のテキストと中文混合，还有emoji 🎉🚀 and café, naïve, e\u0301\u0301 combining marks",
      "   leading spaces and trailing   \r\n\r\n",
      "I'LL DO IT, you'd've thought; 'quoted' \"double\"",
  };
  for (const std::string& s : texts) {
    const auto a = gguf->tokenizer.encode(s), b = folder->encode(s);
    EXPECT_EQ(a, b) << s;
    EXPECT_EQ(gguf->tokenizer.decode(a), folder->decode(b)) << s;
  }
  ASSERT_TRUE(gguf->chat_template.has_value());
  auto from_dir = text::ChatTemplate::from_model_dir(test_data_path("../models/demo/target"));
  ASSERT_TRUE(from_dir.ok()) << from_dir.error().message;
  text::ChatRequest r;
  using text::OrderedJson;
  r.messages = OrderedJson::array({OrderedJson{{"role", "system"}, {"content", "Be brief."}},
                                   OrderedJson{{"role", "user"}, {"content", "Hi there"}}});
  auto x = gguf->chat_template->render(r);
  auto y = from_dir->render(r);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(*x, *y);
  EXPECT_NE(x->find("<|im_start|>user\nHi there<|im_end|>"), std::string::npos) << *x;
  // general.sampling.* (the converter copies generation_config.json)
  EXPECT_NEAR(gguf->sampling.temperature, 0.7f, 1e-6);
  EXPECT_EQ(gguf->sampling.top_k, 20);
}

TEST(GgufText, FileWithoutTokenizerIsNamed) {
  auto r = cli::load_gguf_text(test_data_path("fixtures/gguf/qwen35-dense-tiny-Q8_0.gguf"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("qwen35-dense-tiny-Q8_0.gguf: no tokenizer in the GGUF metadata"), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace kapitsa::testing
