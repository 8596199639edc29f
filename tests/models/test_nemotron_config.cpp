// Nemotron-H config parsing and loading: both fixture configs (pattern string with a bare Infinity,
// block-type list with {"__float__": "Infinity"}), legacy mamba_* names, clear errors for a pattern
// that disagrees with num_hidden_layers, an unknown pattern letter or block name, a missing expert
// tensor; and the other tensor layouts real checkpoints use (model.* names, transformers' 3-D experts)
// loading to the same logits as the released backbone.* layout.
#include "base/json.h"
#include "cli_runner.h"
#include "models/model.h"
#include "models/nemotron_h/config.h"
#include "test_util.h"
#include "weights/hf_config.h"
#include "weights/safetensors.h"
#include "weights/safetensors_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>

namespace kapitsa::testing {
namespace {

namespace nh = models::nemotron_h;
namespace fs = std::filesystem;

Json fixture_config(const std::string& name) {
  auto json = read_json_file(test_data_path("fixtures/" + name + "/config.json"));
  EXPECT_TRUE(json.ok());
  return *json;
}

Expected<nh::NemotronHConfig> parse(const Json& json) {
  return nh::parse_config(weights::HfConfig::from_json(json, "config.json"));
}

TEST(NemotronConfig, ParsesBothFixtureConfigs) {
  auto tiny = parse(fixture_config("nemotron-h-tiny"));
  ASSERT_TRUE(tiny.ok()) << tiny.error().message;
  EXPECT_EQ(tiny->pattern(), "M-M*EMEM*E");
  EXPECT_EQ(tiny->n_layers, 10);
  EXPECT_EQ(tiny->mamba_heads, 8);
  EXPECT_EQ(tiny->n_groups, 2);
  EXPECT_EQ(tiny->chunk_size, 32);
  EXPECT_EQ(tiny->time_step_limit[0], 0.0);
  EXPECT_TRUE(std::isinf(tiny->time_step_limit[1]));
  EXPECT_EQ(tiny->moe_latent_size, 0);
  EXPECT_EQ(tiny->shared_expert_intermediate_size, 96);
  EXPECT_FLOAT_EQ(tiny->routed_scaling_factor, 2.5);

  auto latent = parse(fixture_config("nemotron-h-latent-tiny"));
  ASSERT_TRUE(latent.ok()) << latent.error().message;
  EXPECT_EQ(latent->pattern(), "MEM*EMEM*E");
  EXPECT_TRUE(std::isinf(latent->time_step_limit[1]));
  EXPECT_EQ(latent->moe_latent_size, 64);
  EXPECT_EQ(latent->n_group, 4);
  EXPECT_EQ(latent->topk_group, 2);
  EXPECT_EQ(latent->top_k, 4);
}

TEST(NemotronConfig, LegacyNamesAndLegacyBlockTypes) {
  Json j = fixture_config("nemotron-h-tiny");
  j.erase("n_groups");
  j.erase("chunk_size");
  j["mamba_n_groups"] = 4;
  j["mamba_chunk_size"] = 64;
  j["mamba_d_conv"] = 3;
  j["mamba_dt_limit"] = Json::array({0.01, 5.0});
  j.erase("hybrid_override_pattern");
  j["layers_block_type"] = {"mamba", "mlp", "mamba", "attention", "moe", "mamba", "moe", "mamba", "attention", "moe"};
  auto c = parse(j);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->n_groups, 4);
  EXPECT_EQ(c->chunk_size, 64);
  EXPECT_EQ(c->d_conv, 3);
  EXPECT_DOUBLE_EQ(c->time_step_limit[0], 0.01);
  EXPECT_DOUBLE_EQ(c->time_step_limit[1], 5.0);
  EXPECT_EQ(c->pattern(), "M-M*EMEM*E");
}

TEST(NemotronConfig, PatternLengthMustMatchNumHiddenLayers) {
  Json j = fixture_config("nemotron-h-tiny");
  j["num_hidden_layers"] = 12;
  auto c = parse(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("num_hidden_layers"), std::string::npos) << c.error().message;
  EXPECT_NE(c.error().message.find("10 layers"), std::string::npos) << c.error().message;
}

TEST(NemotronConfig, UnknownPatternLetterOrBlockName) {
  Json j = fixture_config("nemotron-h-tiny");
  j["hybrid_override_pattern"] = "M-M*EXEM*E";
  auto c = parse(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("'X' at position 5"), std::string::npos) << c.error().message;

  Json l = fixture_config("nemotron-h-latent-tiny");
  l["layers_block_type"][2] = "gated_delta_net";
  auto d = parse(l);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("layers_block_type"), std::string::npos) << d.error().message;
  EXPECT_NE(d.error().message.find("gated_delta_net"), std::string::npos) << d.error().message;
}

TEST(NemotronConfig, MissingPatternAndBadRouting) {
  Json j = fixture_config("nemotron-h-tiny");
  j.erase("hybrid_override_pattern");
  auto c = parse(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("hybrid_override_pattern"), std::string::npos) << c.error().message;

  Json k = fixture_config("nemotron-h-latent-tiny");
  k["num_experts_per_tok"] = 9;  // only topk_group (2) × 4 experts per group = 8 can be chosen
  auto d = parse(k);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("num_experts_per_tok"), std::string::npos) << d.error().message;
}

// Copies a fixture into `dir` with its tensors renamed / reshaped by `edit`, which returns false to drop
// one; with add_mtp, also an mtp.* tensor (as Nemotron 3 Super ships) that the loader must ignore.
using Edit = std::function<bool(std::string& name, Tensor& tensor, std::vector<Buffer>& keep)>;
void rewrite_fixture(const std::string& fixture, const std::string& dir, const Edit& edit, bool add_mtp = false) {
  const std::string src = test_data_path("fixtures/" + fixture);
  fs::create_directories(dir);
  fs::copy_file(src + "/config.json", dir + "/config.json", fs::copy_options::overwrite_existing);
  auto ckpt = weights::Checkpoint::open(src + "/model.safetensors");
  ASSERT_TRUE(ckpt.ok());
  std::vector<weights::NamedTensor> out;
  std::vector<Buffer> keep;
  for (const auto& name : ckpt->names()) {
    auto t = ckpt->get_any_shape(name);
    ASSERT_TRUE(t.ok()) << name;
    std::string new_name = name;
    Tensor tensor = *t;
    if (edit(new_name, tensor, keep)) out.push_back({new_name, tensor});
    if (add_mtp && name == "backbone.norm_f.weight") out.push_back({"mtp.layers.0.enorm.weight", *t});
  }
  ASSERT_TRUE(weights::write_safetensors(dir + "/model.safetensors", out).ok());
}

TEST(NemotronLoad, MissingExpertTensorIsAClearError) {
  ScratchDir dir;
  rewrite_fixture("nemotron-h-tiny", dir.path("m"), [](std::string& name, Tensor&, std::vector<Buffer>&) {
    return name != "backbone.layers.4.mixer.experts.3.up_proj.weight";
  });
  auto model = models::load_model(dir.path("m"));
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message.find("backbone.layers.4.mixer.experts.3.up_proj.weight"), std::string::npos)
      << model.error().message;
}

std::vector<float> first_logits(const std::string& dir, std::span<const int32_t> ids) {
  auto model = models::load_model(dir);
  EXPECT_TRUE(model.ok()) << (model.ok() ? "" : model.error().message);
  if (!model.ok()) return {};
  const int64_t T = static_cast<int64_t>(ids.size()), V = (*model)->info().vocab_size;
  auto state = (*model)->new_state(T);
  Buffer logits = Buffer::allocate(DType::f32, {T, V});
  EXPECT_TRUE((*model)->forward(ids, *state, logits).ok());
  return std::vector<float>(logits.f32(), logits.f32() + T * V);
}

// transformers' own layout: model.* instead of backbone.*, experts fused into experts.up_proj [E, I, in]
// and experts.down_proj [E, in, I]; also an mtp.* tensor that must be ignored.
TEST(NemotronLoad, TransformersLayoutGivesTheSameLogits) {
  for (const char* fixture : {"nemotron-h-tiny", "nemotron-h-latent-tiny"}) {
    SCOPED_TRACE(fixture);
    ScratchDir dir;
    auto src = weights::Checkpoint::open(test_data_path(std::string("fixtures/") + fixture));
    ASSERT_TRUE(src.ok());
    rewrite_fixture(fixture, dir.path("m"), [&](std::string& name, Tensor& tensor, std::vector<Buffer>& keep) {
      const std::string expert_tag = ".mixer.experts.";
      const size_t at = name.find(expert_tag);
      if (at != std::string::npos) {
        // Fuse at experts.0.*; drop the others.
        const std::string rest = name.substr(at + expert_tag.size());  // "{e}.up_proj.weight"
        const std::string e = rest.substr(0, rest.find('.')), proj = rest.substr(rest.find('.') + 1);
        if (e != "0") return false;
        const std::string layer = name.substr(0, at + expert_tag.size());
        int64_t E = 0;
        while (src->contains(layer + std::to_string(E) + "." + proj)) ++E;
        Buffer fused = Buffer::allocate(tensor.dtype(), {E, tensor.dim(0), tensor.dim(1)});
        for (int64_t i = 0; i < E; ++i) {
          auto part = src->get_any_shape(layer + std::to_string(i) + "." + proj);
          std::memcpy(fused.tensor().index(i).data(), part->data(), part->nbytes());
        }
        name = layer + proj.substr(0, proj.size() - std::string(".weight").size());
        tensor = fused.tensor();
        keep.push_back(std::move(fused));
      }
      if (name.rfind("backbone.", 0) == 0) name = "model." + name.substr(9);
      return true;
    }, /*add_mtp=*/true);
    const int32_t ids[] = {3, 99, 1500, 7, 42, 2000, 5, 11};
    const std::vector<float> ours = first_logits(dir.path("m"), ids);
    const std::vector<float> released = first_logits(test_data_path(std::string("fixtures/") + fixture), ids);
    ASSERT_EQ(ours.size(), released.size());
    ASSERT_FALSE(ours.empty());
    for (size_t i = 0; i < ours.size(); ++i) ASSERT_EQ(ours[i], released[i]) << i;
  }
}

// A clone is a snapshot: continuing the clone and the original with the same tokens gives the same
// logits, and continuing the original does not disturb the clone (conv windows, SSM state and KV).
TEST(NemotronLoad, CloneSnapshotsEveryKindOfState) {
  auto model = models::load_model(test_data_path("fixtures/nemotron-h-tiny"));
  ASSERT_TRUE(model.ok()) << model.error().message;
  const int64_t V = (*model)->info().vocab_size;
  const int32_t prefix[] = {3, 99, 1500, 7, 42}, a[] = {2000, 5}, b[] = {11, 600};
  auto state = (*model)->new_state(16);
  Buffer logits = Buffer::allocate(DType::f32, {1, V});
  ASSERT_TRUE((*model)->forward(prefix, *state, logits).ok());
  auto snapshot = state->clone();
  EXPECT_EQ(snapshot->n_past(), 5);
  EXPECT_EQ(snapshot->bytes(), state->bytes());
  Buffer first = Buffer::allocate(DType::f32, {1, V}), other = Buffer::allocate(DType::f32, {1, V});
  ASSERT_TRUE((*model)->forward(a, *state, first).ok());
  ASSERT_TRUE((*model)->forward(b, *state, other).ok());  // moves the original further on
  Buffer again = Buffer::allocate(DType::f32, {1, V});
  ASSERT_TRUE((*model)->forward(a, *snapshot, again).ok());
  EXPECT_EQ(max_abs_diff(again, first), 0.0);
  EXPECT_GT(max_abs_diff(other, first), 0.0);
}

}  // namespace
}  // namespace kapitsa::testing
