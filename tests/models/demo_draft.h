// The demo draft model opened for tests that rewrite it in a quantized format (FP8, NVFP4, mlx's
// block-float modes): its checkpoint, config.json, reference prompt, and which tensors count as the
// projections to convert (2-D layer weights that are not norms; the vision tower left out).
#pragma once

#include "base/json.h"
#include "fixture_reference.h"
#include "test_util.h"
#include "weights/safetensors.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace kapitsa::testing {

struct DemoDraft {
  std::string dir;
  FixtureReference ref;
  std::unique_ptr<weights::Checkpoint> ckpt;
  Json config;
};

inline DemoDraft open_demo_draft() {
  DemoDraft d;
  d.dir = test_data_path("../models/demo/draft");
  d.ref = load_fixture_reference(d.dir);
  auto ckpt = weights::Checkpoint::open(d.dir);
  EXPECT_TRUE(ckpt.ok());
  if (ckpt.ok()) d.ckpt = std::make_unique<weights::Checkpoint>(std::move(*ckpt));
  auto config = read_json_file(d.dir + "/config.json");
  EXPECT_TRUE(config.ok());
  if (config.ok()) d.config = *config;
  return d;
}

inline bool is_draft_projection(const std::string& name, const Tensor& t) {
  const std::string suffix = ".weight";
  return t.rank() == 2 && name.find("layers.") != std::string::npos && name.find("norm") == std::string::npos &&
         name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         name.find("visual") == std::string::npos;
}

}  // namespace kapitsa::testing
