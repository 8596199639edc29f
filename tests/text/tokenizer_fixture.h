// Shared by the tokenizer tests: the Qwen3 tokenizer from tests/text/data/qwen3 (loaded once) and its
// golden.json (ids and decodings from Hugging Face tokenizers 0.23.2).
#pragma once

#include "base/json.h"
#include "test_util.h"
#include "text/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kapitsa::testing {

struct GoldenCase {
  std::string text;
  std::vector<int32_t> ids;
  std::string decoded;
};

inline std::string qwen3_dir() { return test_data_path("text/data/qwen3"); }

inline const text::Tokenizer& qwen3_tokenizer() {
  static const text::Tokenizer* tok = [] {
    auto t = text::Tokenizer::load(qwen3_dir());
    if (!t.ok()) {
      ADD_FAILURE() << t.error().message;
      std::abort();
    }
    return new text::Tokenizer(std::move(t).value());
  }();
  return *tok;
}

inline const std::vector<GoldenCase>& qwen3_golden() {
  static const std::vector<GoldenCase> cases = [] {
    std::vector<GoldenCase> out;
    auto j = read_json_file(qwen3_dir() + "/golden.json");
    if (!j.ok()) {
      ADD_FAILURE() << j.error().message;
      return out;
    }
    for (const Json& e : *j)
      out.push_back({e["text"].get<std::string>(), e["ids"].get<std::vector<int32_t>>(), e["decoded"].get<std::string>()});
    return out;
  }();
  return cases;
}

}  // namespace kapitsa::testing
