// The closed table of architectures: config.json model_type → loader. Adding an architecture adds
// one row here (and its folder under models/).
#include "models/model.h"

#include "models/qwen35/qwen35_model.h"
#include "weights/hf_config.h"

#include <functional>

namespace kapitsa::models {
namespace {

using Loader = std::function<Expected<std::unique_ptr<Model>>(const std::string& dir, const weights::HfConfig&)>;

struct Entry {
  const char* model_type;
  Loader load;
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> table = {
      {"qwen3_5", qwen35::load},      {"qwen3_5_moe", qwen35::load},      {"qwen3_next", qwen35::load},
      {"qwen3_5_text", qwen35::load}, {"qwen3_5_moe_text", qwen35::load},
  };
  return table;
}

}  // namespace

std::vector<std::string> known_model_types() {
  std::vector<std::string> names;
  for (const auto& e : registry()) names.emplace_back(e.model_type);
  return names;
}

Expected<std::unique_ptr<Model>> load_model(const std::string& dir) {
  KAPITSA_TRY(weights::HfConfig config, weights::HfConfig::load(dir));
  KAPITSA_TRY(std::string model_type, config.get_string("model_type"));
  for (const auto& e : registry())
    if (model_type == e.model_type) return e.load(dir, config);
  std::string known;
  for (const auto& name : known_model_types()) known += (known.empty() ? "" : ", ") + name;
  return error("{}: unknown model_type '{}' (Kapitsa runs: {})", config.where("model_type").substr(0, config.path().size()),
               model_type, known);
}

}  // namespace kapitsa::models
