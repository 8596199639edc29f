// kapitsa quantize: plan which tensors are quantized at which bits, then write shard by shard (so at
// most one shard of output is in memory), then the index, config.json and the other files.
#include "models/quantize_checkpoint.h"

#include "base/json.h"
#include "models/affine_quantize.h"
#include "tensor/linear.h"
#include "weights/safetensors.h"
#include "weights/safetensors_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

namespace kapitsa::models {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxShardBytes = int64_t{5} << 30;  // mlx-lm's MAX_FILE_SIZE_GB

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// What mlx-lm's sanitize leaves out and Kapitsa does not read: the vision tower.
bool dropped(const std::string& name) {
  return name.rfind("vision_tower", 0) == 0 || name.rfind("model.visual", 0) == 0 || name.rfind("visual.", 0) == 0;
}

// The multi-token-prediction head: quantized like the rest but written to its own model-mtp.safetensors,
// the file MLX folders that keep a head use (mlx-lm's sanitize drops mtp.* on load, so the folder stays
// one it reads; Kapitsa reads every model*.safetensors and so gets the head for --spec mtp).
bool is_mtp(const std::string& name) { return name.rfind("mtp.", 0) == 0 || contains(name, ".mtp."); }

// The module path of a tensor mlx-lm would quantize (its module has to_quantized), by name and rank;
// nullopt for tensors kept as they are.
std::optional<std::string> quantizable_module(const std::string& name, int rank, bool nemotron) {
  const bool weight = ends_with(name, ".weight");
  const std::string module = weight ? name.substr(0, name.size() - 7) : name;
  if (rank == 2 && weight) {
    const std::string last = module.substr(module.rfind('.') + 1);
    if (contains(last, "norm")) return std::nullopt;
    if (nemotron && ends_with(module, "mixer.gate")) return std::nullopt;  // MoEGate: a bare parameter
    return module;
  }
  if (rank == 3 && weight && contains(name, ".switch_mlp.")) return module;  // mlx-lm's expert stacks
  if (rank == 3 && !weight && contains(name, "experts.")) return module;     // HF fused experts
  return std::nullopt;  // conv1d [C, 1, K], norms, biases, A_log, ...
}

struct Recipe {
  int low = 0, high = 0;
};

std::optional<Recipe> recipe_bits(const std::string& name) {
  if (name == "mixed_2_6") return Recipe{2, 6};
  if (name == "mixed_3_4") return Recipe{3, 4};
  if (name == "mixed_3_6") return Recipe{3, 6};
  if (name == "mixed_4_6") return Recipe{4, 6};
  return std::nullopt;
}

struct Planned {
  std::string name;
  std::optional<std::string> module;  // set: quantized
  int bits = 0, group_size = 0;
  bool own_entry = false;   // written as a per-module entry in the config
  bool with_mode = false;   // the entry carries "mode" (mlx-lm's recipes write it, the routers' rule does not)
  int64_t in_bytes = 0, out_bytes = 0;
};

int64_t num_layers(const Json& config) {
  for (const Json* c : {&config, config.contains("text_config") ? &config["text_config"] : nullptr})
    if (c && c->contains("num_hidden_layers") && (*c)["num_hidden_layers"].is_number_integer())
      return (*c)["num_hidden_layers"].get<int64_t>();
  return 0;
}

}  // namespace

Expected<int64_t> checkpoint_tensor_bytes(const std::string& in) {
  KAPITSA_TRY(weights::Checkpoint ckpt, weights::Checkpoint::open(in));
  int64_t total = 0;
  for (const std::string& name : ckpt.names())
    if (!dropped(name)) total += static_cast<int64_t>(ckpt.find(name)->nbytes);
  return total;
}

Expected<QuantizeSummary> quantize_checkpoint(const std::string& in, const std::string& out, const QuantizeOptions& options) {
  std::optional<Recipe> recipe;
  if (!options.mixed.empty()) {
    recipe = recipe_bits(options.mixed);
    if (!recipe) return error("--mixed {}: unknown recipe (mixed_2_6, mixed_3_4, mixed_3_6, mixed_4_6)", options.mixed);
  }
  const int bits = options.bits != 0 ? options.bits : recipe ? recipe->low : 0;
  if (!Linear::affine_supported(bits, options.group_size))
    return error("{} bits with group size {} is not supported (bits 2, 3, 4, 5, 6, 8; group sizes 32, 64, 128)", bits,
                 options.group_size);
  std::error_code ec;
  if (!fs::is_directory(in, ec)) return error("{}: no such folder", in);
  if (fs::exists(out, ec)) return error("{}: already exists (kapitsa quantize writes a new folder)", out);
  const std::string config_path = (fs::path(in) / "config.json").string();
  KAPITSA_TRY(Json config, read_json_file(config_path));
  for (const char* key : {"quantization", "quantization_config"})
    if (config.contains(key) && !config[key].is_null())
      return error("{}: the checkpoint is already quantized (\"{}\": {}); quantize a bf16, f16 or f32 folder", config_path,
                   key, config[key].dump());
  KAPITSA_TRY(weights::Checkpoint ckpt, weights::Checkpoint::open(in));
  const std::string model_type = config.value("model_type", std::string());
  const bool nemotron = model_type.rfind("nemotron", 0) == 0, qwen = model_type.rfind("qwen3", 0) == 0;

  // mixed recipes: the layer index is the first numeric part of the first down_proj's path
  size_t layer_location = 0;
  const int64_t layers = num_layers(config);
  if (recipe) {
    const std::vector<std::string> names = ckpt.names();
    auto first = std::find_if(names.begin(), names.end(), [](const std::string& n) { return contains(n, "down_proj"); });
    if (first == names.end()) return error("{}: --mixed needs down_proj modules, and the checkpoint has none", in);
    size_t part = 0;
    for (size_t pos = 0;; ++part) {
      const size_t dot = first->find('.', pos);
      const std::string p = first->substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
      if (!p.empty() && std::all_of(p.begin(), p.end(), [](unsigned char c) { return std::isdigit(c); })) break;
      if (dot == std::string::npos) return error("{}: '{}' has no layer index", in, *first);
      pos = dot + 1;
    }
    layer_location = part;
    if (layers <= 0) return error("{}: no num_hidden_layers (needed by --mixed)", config_path);
  }
  auto layer_of = [&](const std::string& path) -> int64_t {
    size_t pos = 0;
    for (size_t i = 0; i < layer_location; ++i) {
      pos = path.find('.', pos);
      if (pos == std::string::npos) return 0;
      ++pos;
    }
    const std::string p = path.substr(pos, path.find('.', pos) - pos);
    return !p.empty() && std::all_of(p.begin(), p.end(), [](unsigned char c) { return std::isdigit(c); }) ? std::stoll(p) : 0;
  };

  // The plan: every tensor's fate and output size.
  std::vector<Planned> plan;
  QuantizeSummary summary;
  int64_t quantized_bits = 0, quantized_values = 0;
  for (const std::string& name : ckpt.names()) {
    const weights::TensorEntry& entry = *ckpt.find(name);
    if (dropped(name)) {
      ++summary.dropped;
      continue;
    }
    if (entry.dtype == DType::u32 || entry.ggml || ends_with(name, ".scales"))
      return error("{}: tensor '{}' is already quantized ({}); quantize a bf16, f16 or f32 folder", ckpt.file_of(name), name,
                   dtype_name(entry.dtype));
    Planned p;
    p.name = name;
    p.in_bytes = p.out_bytes = static_cast<int64_t>(entry.nbytes);
    const int rank = static_cast<int>(entry.shape.size());
    const bool floating = entry.dtype == DType::f32 || entry.dtype == DType::f16 || entry.dtype == DType::bf16;
    std::optional<std::string> module = floating ? quantizable_module(name, rank, nemotron) : std::nullopt;
    const int64_t K = rank > 0 ? entry.shape.back() : 0;
    if (module && K % options.group_size == 0) {  // mlx-lm tests the global group size
      p.bits = bits, p.group_size = options.group_size;
      if (recipe) {
        const int64_t i = layer_of(*module);
        const bool more = i < layers / 8 || i >= 7 * layers / 8 || (i - layers / 8) % 3 == 2;
        const bool high = ((contains(*module, "v_proj") || contains(*module, "v_a_proj") || contains(*module, "v_b_proj")) && more) ||
                          (contains(*module, "down_proj") && more) || contains(*module, "lm_head");
        p.bits = high ? recipe->high : recipe->low;
        p.own_entry = p.with_mode = true;
      } else if (qwen && (ends_with(*module, "mlp.gate") || ends_with(*module, "shared_expert_gate"))) {
        p.bits = 8, p.group_size = 64, p.own_entry = true;  // routers: mlx-lm's Qwen quant_predicate
      }
      if (K % p.group_size == 0) {
        p.module = module;
        const int64_t values = static_cast<int64_t>(entry.nbytes / dtype_size(entry.dtype));
        p.out_bytes = values * p.bits / 8 + 2 * (values / p.group_size) * static_cast<int64_t>(dtype_size(entry.dtype));
        quantized_bits += p.out_bytes * 8, quantized_values += values;
      }
    }
    plan.push_back(p);
  }

  // Shards as mlx-lm cuts them: in order, a new one when the next tensor would pass 5 GiB; the head last,
  // in a file of its own.
  const size_t n_trunk = static_cast<size_t>(
      std::stable_partition(plan.begin(), plan.end(), [](const Planned& p) { return !is_mtp(p.name); }) - plan.begin());
  std::vector<std::pair<size_t, size_t>> shards;  // [begin, end) of plan
  int64_t size = 0;
  for (size_t i = 0; i < n_trunk; ++i) {
    if (shards.empty() || (size + plan[i].out_bytes > kMaxShardBytes && shards.back().second > shards.back().first)) {
      shards.push_back({i, i});
      size = 0;
    }
    shards.back().second = i + 1;
    size += plan[i].out_bytes;
  }
  const size_t n_trunk_shards = shards.size();
  if (n_trunk < plan.size()) shards.push_back({n_trunk, plan.size()});

  fs::create_directories(out, ec);
  if (ec) return error("{}: cannot create the folder: {}", out, ec.message());
  Json weight_map = Json::object();
  int64_t total_out = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = s == n_trunk_shards ? "model-mtp.safetensors"
                             : n_trunk_shards == 1 ? "model.safetensors"
                                                   : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n_trunk_shards);
    std::vector<weights::NamedTensor> tensors;
    std::vector<AffineQuantized> keep;
    keep.reserve(shards[s].second - shards[s].first);
    int64_t shard_bytes = 0;
    for (size_t i = shards[s].first; i < shards[s].second; ++i) {
      const Planned& p = plan[i];
      auto got = ckpt.get_any_shape(p.name, {DType::f32, DType::f16, DType::bf16, DType::f8_e4m3, DType::f64, DType::u8,
                                             DType::i8, DType::u16, DType::i16, DType::i32, DType::i64, DType::boolean});
      if (!got.ok()) return got.error();
      if (p.module) {
        auto q = affine_quantize(*got, p.bits, p.group_size);
        if (!q.ok()) return error("{}: tensor '{}': {}", ckpt.file_of(p.name), p.name, q.error().message);
        keep.push_back(std::move(*q));
        tensors.push_back({p.name, keep.back().codes});
        tensors.push_back({*p.module + ".scales", keep.back().scales});
        tensors.push_back({*p.module + ".biases", keep.back().biases});
        ++summary.quantized;
      } else {
        tensors.push_back({p.name, *got});
        ++summary.kept;
      }
      shard_bytes += p.out_bytes;
      if (options.on_tensor) options.on_tensor(p.in_bytes);
      summary.input_bytes += p.in_bytes;
    }
    for (const weights::NamedTensor& t : tensors) weight_map[t.name] = file;
    KAPITSA_RETURN_IF_ERROR(weights::write_safetensors((fs::path(out) / file).string(), tensors, {{"format", "mlx"}}));
    total_out += shard_bytes;
    if (options.on_shard) options.on_shard(file, shard_bytes);
  }
  summary.output_bytes = total_out;
  summary.shards = static_cast<int>(n_trunk_shards);
  summary.bits_per_weight = quantized_values > 0 ? double(quantized_bits) / double(quantized_values) : 0;

  Json index = {{"metadata", {{"total_size", total_out}}}, {"weight_map", weight_map}};  // nlohmann sorts keys
  std::ofstream(fs::path(out) / "model.safetensors.index.json") << index.dump(4) << "\n";

  Json q = {{"group_size", options.group_size}, {"bits", bits}, {"mode", "affine"}};
  for (const Planned& p : plan)
    if (p.module && p.own_entry) {
      q[*p.module] = {{"group_size", p.group_size}, {"bits", p.bits}};
      if (p.with_mode) q[*p.module]["mode"] = "affine";
    }
  config["quantization"] = q;
  config["quantization_config"] = q;
  std::ofstream config_out(fs::path(out) / "config.json");
  config_out << config.dump(4) << "\n";
  if (!config_out) return error("{}: cannot write config.json", out);

  // The rest of the folder: tokenizer, generation config, chat template, … (not weights, not packed data).
  for (const fs::directory_entry& f : fs::directory_iterator(in, ec)) {
    const std::string n = f.path().filename().string();
    if (!f.is_regular_file() || n.empty() || n[0] == '.' || n == "config.json" || ends_with(n, ".safetensors") ||
        ends_with(n, ".safetensors.index.json") || ends_with(n, ".xz"))
      continue;
    fs::copy_file(f.path(), fs::path(out) / n, ec);
    if (ec) return error("{}: cannot copy to {}: {}", f.path().string(), out, ec.message());
  }
  return summary;
}

}  // namespace kapitsa::models
