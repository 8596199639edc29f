// Tiny fixtures with a random MTP head, for tests: a copy of tests/fixtures/NAME in a scratch folder
// with mtp.* tensors in model-mtp.safetensors (the loader reads every model*.safetensors of a folder);
// for Nemotron, nemotron-h-tiny with the head of tests/fixtures/nemotron-h-tiny-mtp; and a head's output
// over a fixture's prompt.
#pragma once

#include "fixture_reference.h"
#include "models/model.h"
#include "test_util.h"
#include "weights/safetensors.h"
#include "weights/safetensors_writer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace kapitsa::testing {

// A copy of a tiny fixture with random mtp.* tensors in model-mtp.safetensors: shapes copied from the
// fixture's own full-attention layer, fc [H, 2H], norms [H]; `change` edits the list before writing.
inline std::string fixture_with_mtp(const std::string& fixture, const std::filesystem::path& dir,
                             const std::function<void(std::vector<weights::NamedTensor>&)>& change = {}) {
  namespace fs = std::filesystem;
  const fs::path src = test_data_path("fixtures/" + fixture);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(src / f, dir / f, fs::copy_options::overwrite_existing);
  auto ckpt = weights::Checkpoint::open(src.string());
  EXPECT_TRUE(ckpt.ok());
  std::string layer, prefix = ckpt->contains("model.language_model.norm.weight") ? "model.language_model." : "model.";
  for (const auto& name : ckpt->names())
    if (name.find(".self_attn.q_proj.weight") != std::string::npos) {
      layer = name.substr(0, name.find("self_attn."));
      break;
    }
  const int64_t H = ckpt->find(prefix + "norm.weight")->shape[0];
  std::mt19937_64 rng(fresh_seed());
  std::vector<Buffer> keep;
  std::vector<weights::NamedTensor> tensors;
  auto add = [&](const std::string& name, Shape shape, bool norm) {
    keep.push_back(random_buffer(rng, DType::bf16, std::move(shape), norm ? -0.1f : -0.05f, norm ? 0.1f : 0.05f));
    tensors.push_back({name, keep.back()});
  };
  for (const auto& name : ckpt->names())
    if (name.rfind(layer, 0) == 0) {
      const auto& sh = ckpt->find(name)->shape;
      Shape shape;
      shape.rank = static_cast<int>(sh.size());
      std::copy(sh.begin(), sh.end(), shape.dims.begin());
      add("mtp.layers.0." + name.substr(layer.size()), shape, name.find("norm") != std::string::npos);
    }
  add("mtp.fc.weight", {H, 2 * H}, false);
  for (const char* n : {"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"})
    add(n, {H}, true);
  if (change) change(tensors);
  EXPECT_TRUE(weights::write_safetensors((dir / "model-mtp.safetensors").string(), tensors).ok());
  return dir.string();
}

inline void replace_once(std::string& text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
}

// A copy of nemotron-h-tiny with the random Nemotron 3 MTP head of tests/fixtures/nemotron-h-tiny-mtp
// (config.json with mtp_hybrid_override_pattern "*E", model-mtp.safetensors), `edit` applied to the
// config's text before writing. tools/fixtures/nemotron_mtp_reference.py wrote the head and its reference.
inline std::string nemotron_with_mtp(const std::filesystem::path& dir, const std::function<void(std::string&)>& edit = {}) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const fs::path trunk = test_data_path("fixtures/nemotron-h-tiny"), head = test_data_path("fixtures/nemotron-h-tiny-mtp");
  fs::copy_file(trunk / "model.safetensors", dir / "model.safetensors", fs::copy_options::overwrite_existing);
  fs::copy_file(head / "model-mtp.safetensors", dir / "model-mtp.safetensors", fs::copy_options::overwrite_existing);
  std::ifstream in(head / "config.json");
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (edit) edit(config);  // as text: the config keeps NVIDIA's bare Infinity
  std::ofstream(dir / "config.json") << config;
  return dir.string();
}

// The head over a fixture's prompt (row i: token i + 1 with the reference's final-normed hidden row i):
// logits [n, V] and output rows [n, H].
struct HeadRows {
  Buffer logits, rows;
};
inline HeadRows head_over_prompt(const std::string& path, const std::string& fixture) {
  auto model = models::load_model(path);
  EXPECT_TRUE(model.ok()) << (model.ok() ? "" : model.error().message);
  if (!model.ok()) return {};
  const models::Model& m = **model;
  EXPECT_EQ(m.info().mtp_layers, 1);
  FixtureReference ref = load_fixture_reference(test_data_path("fixtures/" + fixture));
  const int64_t n = static_cast<int64_t>(ref.prompt_ids.size()) - 1, V = m.info().vocab_size, H = m.info().hidden_size;
  const Tensor hidden = ref.hidden_states.index(ref.hidden_states.dim(0) - 1).rows(0, n);
  HeadRows out{Buffer::allocate(DType::f32, {n, V}), Buffer::allocate(DType::f32, {n, H})};
  auto state = m.new_state(n + 1);
  const std::span<const int32_t> next(ref.prompt_ids.data() + 1, static_cast<size_t>(n));
  const models::Model::MtpRows rows[] = {{state.get(), 0, next, hidden, out.logits, out.rows}};
  const Status s = m.run_mtp(rows);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return out;
}

}  // namespace kapitsa::testing
