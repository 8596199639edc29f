// Weight byte figures come from the loaded matrices, for any family: resident bytes are every
// language-model matrix of the checkpoint once; a dense model reads all of them per decode token but
// the embedding (unless it is the tied head); a MoE model reads less than it holds.
#include "models/model.h"
#include "test_util.h"
#include "weights/safetensors.h"

#include <gtest/gtest.h>

namespace kapitsa::testing {
namespace {

TEST(WeightBytes, DenseModelReadsEveryMatrixButTheEmbedding) {
  const std::string dir = test_data_path("fixtures/qwen35-dense-tiny");
  auto model = models::load_model(dir);
  auto ckpt = weights::Checkpoint::open(dir);
  ASSERT_TRUE(model.ok() && ckpt.ok());
  int64_t matrices = 0, embedding = 0;
  bool has_head = false;
  for (const std::string& name : ckpt->names()) {
    if (name.rfind("model.visual.", 0) == 0 || name.rfind("mtp.", 0) == 0) continue;
    const auto* entry = ckpt->find(name);
    if (entry->shape.size() != 2) continue;
    const auto bytes = static_cast<int64_t>(entry->nbytes);
    matrices += bytes;
    if (name.find("embed_tokens") != std::string::npos) embedding = bytes;
    has_head |= name == "lm_head.weight";
  }
  ASSERT_GT(embedding, 0);
  const auto& info = (*model)->info();
  EXPECT_EQ(info.resident_weight_bytes, matrices);
  EXPECT_EQ(info.weight_bytes_per_token, has_head ? matrices - embedding : matrices);
}

TEST(WeightBytes, MoeModelReadsLessThanItHolds) {
  for (const char* fixture : {"qwen35-moe-tiny", "nemotron-h-latent-tiny"}) {
    auto model = models::load_model(test_data_path(std::string("fixtures/") + fixture));
    ASSERT_TRUE(model.ok());
    const auto& info = (*model)->info();
    EXPECT_GT(info.weight_bytes_per_token, 0) << fixture;
    EXPECT_LT(info.weight_bytes_per_token, info.resident_weight_bytes) << fixture;
  }
}

}  // namespace
}  // namespace kapitsa::testing
