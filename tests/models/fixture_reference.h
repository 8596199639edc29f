// Loading a fixture's reference.safetensors (prompt_ids, prompt_logits, hidden_states, greedy_ids,
// greedy_logits, computed by Hugging Face transformers in float32) for the model tests.
#pragma once

#include "tensor/tensor.h"
#include "weights/safetensors.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kapitsa::testing {

struct FixtureReference {
  weights::Checkpoint file;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> greedy_ids;
  Tensor prompt_logits;  // [T, V]
  Tensor hidden_states;  // [L+1, T, H]
  Tensor greedy_logits;  // [N, V]
};

inline FixtureReference load_fixture_reference(const std::string& fixture_dir) {
  FixtureReference r;
  auto file = weights::Checkpoint::open(fixture_dir + "/reference.safetensors");
  EXPECT_TRUE(file.ok()) << (file.ok() ? "" : file.error().message);
  r.file = std::move(file.value());
  auto ids = [&](const char* name) {
    auto t = r.file.get_any_shape(name, {DType::i32});
    EXPECT_TRUE(t.ok());
    const int32_t* p = t->data_as<const int32_t>();
    return std::vector<int32_t>(p, p + t->numel());
  };
  r.prompt_ids = ids("prompt_ids");
  r.greedy_ids = ids("greedy_ids");
  r.prompt_logits = r.file.get_any_shape("prompt_logits", {DType::f32}).value();
  r.hidden_states = r.file.get_any_shape("hidden_states", {DType::f32}).value();
  r.greedy_logits = r.file.get_any_shape("greedy_logits", {DType::f32}).value();
  return r;
}

}  // namespace kapitsa::testing
