// The closed table of architectures: config.json model_type → loader. Adding an architecture adds
// one row here (and its folder under models/).
#include "models/model.h"

#include "base/json.h"
#include "base/log.h"
#include "ops/memory.h"
#include "models/gguf_checkpoint.h"
#include "models/nemotron_h/nemotron_h_model.h"
#include "models/qwen35/qwen35_model.h"
#include "weights/hf_config.h"
#include "weights/safetensors.h"
#include "weights/safetensors_writer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace kapitsa::models {
namespace {

using Loader = Expected<std::unique_ptr<Model>> (*)(const weights::HfConfig&, weights::Checkpoint, const LoadOptions&);
// Which optional tensors a released checkpoint of this type has (chooses prefixes and expert layouts
// when writing a random checkpoint in the real layout).
using ReleaseLayout = bool (*)(const std::string& model_type, const std::string& tensor_name);

struct Entry {
  const char* model_type;
  Loader load;
  ReleaseLayout release_layout;
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> table = {
      {"qwen3_5", qwen35::load, qwen35::release_layout},
      {"qwen3_5_moe", qwen35::load, qwen35::release_layout},
      {"qwen3_next", qwen35::load, qwen35::release_layout},
      {"qwen3_5_text", qwen35::load, qwen35::release_layout},
      {"qwen3_5_moe_text", qwen35::load, qwen35::release_layout},
      {"nemotron_h", nemotron_h::load, nemotron_h::release_layout},
  };
  return table;
}

Expected<const Entry*> find_entry(const weights::HfConfig& config) {
  KAPITSA_TRY(std::string model_type, config.get_string("model_type"));
  for (const auto& e : registry())
    if (model_type == e.model_type) return &e;
  std::string known;
  for (const auto& name : known_model_types()) known += (known.empty() ? "" : ", ") + name;
  return error("{}: unknown model_type '{}' (Kapitsa runs: {})", config.path(), model_type, known);
}

// A model for the GPU needs its weights there (and room for KV pages, states and the step's workspace):
// refuse early, saying how much is needed and how much is free, rather than fail mid-upload.
Status check_device_memory(const weights::Checkpoint& checkpoint, Device device, const std::string& dir) {
  if (device == Device::cpu) return ok_status();
  size_t needed = 0;
  for (const std::string& name : checkpoint.names())
    if (const weights::TensorEntry* e = checkpoint.find(name)) needed += e->nbytes;
  const ops::DeviceMemoryInfo m = ops::device_memory(device);
  constexpr double kGiB = 1ull << 30;
  if (needed > m.free_bytes)
    return error("{}: the weights need {:.2f} GiB of GPU memory, but only {:.2f} GiB of {:.2f} GiB are free", dir,
                 static_cast<double>(needed) / kGiB, static_cast<double>(m.free_bytes) / kGiB,
                 static_cast<double>(m.total_bytes) / kGiB);
  return ok_status();
}

}  // namespace

std::vector<std::string> known_model_types() {
  std::vector<std::string> names;
  for (const auto& e : registry()) names.emplace_back(e.model_type);
  return names;
}

Expected<std::unique_ptr<Model>> load_model(const std::string& dir, const LoadOptions& options) {
  if (dir.ends_with(".gguf")) {  // llama.cpp's format: config from the metadata, tensors renamed (gguf_checkpoint.h)
    KAPITSA_TRY(GgufCheckpoint gguf, open_gguf_checkpoint(dir));
    KAPITSA_TRY(const Entry* entry, find_entry(gguf.config));
    KAPITSA_RETURN_IF_ERROR(check_device_memory(gguf.checkpoint, options.device, dir));
    return entry->load(gguf.config, std::move(gguf.checkpoint), options);
  }
  KAPITSA_TRY(weights::HfConfig config, weights::HfConfig::load(dir));
  KAPITSA_TRY(const Entry* entry, find_entry(config));
  KAPITSA_TRY(weights::Checkpoint checkpoint, weights::Checkpoint::open(dir));
  KAPITSA_RETURN_IF_ERROR(check_device_memory(checkpoint, options.device, dir));
  return entry->load(config, std::move(checkpoint), options);
}

Status write_random_checkpoint(const std::string& config_path, const std::string& out_dir, uint64_t seed) {
  namespace fs = std::filesystem;
  KAPITSA_TRY(Json json, read_json_file(config_path));
  if (!json.is_object()) return error("{}: expected a JSON object", config_path);
  const weights::HfConfig config = weights::HfConfig::from_json(json, config_path);
  KAPITSA_TRY(const Entry* entry, find_entry(config));
  const std::string model_type = config.json()["model_type"].get<std::string>();
  const ReleaseLayout layout = entry->release_layout;
  weights::Checkpoint checkpoint = weights::Checkpoint::synthesize(
      [layout, model_type](const std::string& name) { return layout(model_type, name); }, seed);
  KAPITSA_TRY(std::unique_ptr<Model> model, entry->load(config, checkpoint, LoadOptions{}));  // asks for every tensor

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return error("{}: cannot create folder: {}", out_dir, ec.message());
  std::vector<weights::NamedTensor> tensors;
  for (const auto& [name, tensor] : checkpoint.synthesized()) tensors.push_back({name, tensor});
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  log::info("writing {} random tensors to {}", tensors.size(), out_dir);
  KAPITSA_RETURN_IF_ERROR(weights::write_safetensors((fs::path(out_dir) / "model.safetensors").string(), tensors));
  std::ofstream out(fs::path(out_dir) / "config.json");
  out << json.dump(2) << "\n";
  if (!out) return error("{}: cannot write config.json", out_dir);
  return ok_status();
}

}  // namespace kapitsa::models
