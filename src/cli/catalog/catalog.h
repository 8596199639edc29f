// The model catalog (models/catalog.json, plus the user's models.json applied as a JSON merge patch) and
// the resolver that turns what a person types after --model into a folder or a .gguf file: an alias
// ("35b", "27b:6bit"), a Hub id ("org/name[:quant]", looked up in the Hugging Face cache), a folder or a
// .gguf path (passed through). Downloads nothing: an alias not in the cache is an error that names the
// `kapitsa pull` command. Not the loader: what is in the folder is the model code's business.
#pragma once

#include "base/json.h"
#include "base/status.h"

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kapitsa::cli::catalog {

// The shape numbers the memory and speed estimates need (zero when the model has no such layers).
struct ModelShape {
  int attention_layers = 0, kv_heads = 0, head_dim = 0;                             // KV cache per token
  int gdn_layers = 0, gdn_k_heads = 0, gdn_v_heads = 0, gdn_k_dim = 0, gdn_v_dim = 0;  // Gated DeltaNet state
  int mamba_layers = 0, mamba_heads = 0, mamba_head_dim = 0, mamba_state = 0, mamba_groups = 0;  // Mamba-2 state
  int conv_kernel = 4;
};

struct QuantEntry {
  std::string name;   // "4bit"
  std::string repo;   // "org/name" on the Hub
  std::string file;   // one file in the repo (a .gguf), or empty for the whole repository
  double bits_per_weight = 16;
  bool verified = false;  // the repository id was checked against the Hub
  std::string unsupported;  // why Kapitsa cannot run this format yet; empty when it can
};

struct ModelEntry {
  std::string alias;  // "27b"
  std::string name;   // "Qwen3.5-27B"
  double params = 0, active_params = 0;  // total, and read per decoded token (MoE: the active experts)
  long max_context = 0;
  std::string default_quant;
  ModelShape shape;
  std::vector<QuantEntry> quants;
  const QuantEntry* quant(const std::string& q) const;
};

struct Catalog {
  std::vector<ModelEntry> models;
  const ModelEntry* find(const std::string& alias) const;
};

// Parses a catalog in the models/catalog.json shape; `where` names it in errors.
Expected<Catalog> parse_catalog(const Json& json, const std::string& where);

// models/catalog.json shipped with kapitsa (under $KAPITSA_HOME, next to the executable's repository or
// the current directory), with the user file applied on top. A missing user file is not an error.
Expected<Catalog> load_catalog();

// `relative` (e.g. "models/catalog.json") under $KAPITSA_HOME, under each folder above the executable
// (the repository it was built in) or that folder's share/kapitsa (an install prefix: PREFIX/bin/kapitsa),
// or under the current directory: the first candidate `accept` takes.
std::optional<std::filesystem::path> find_shipped(const std::string& relative,
                                                  const std::function<bool(const std::filesystem::path&)>& accept);

// $XDG_CONFIG_HOME/kapitsa/models.json, else ~/.config/kapitsa/models.json.
std::filesystem::path user_catalog_path();

// $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub.
std::filesystem::path hub_cache_dir();

// "org/name" -> "models--org--name" (the Hub cache's folder name).
std::string cache_folder_name(const std::string& repo);

// The snapshot folder of `repo` at refs/main in the Hub cache, if it is there.
std::optional<std::filesystem::path> cached_snapshot(const std::string& repo);

// The repository (and, for a single-file entry such as a .gguf, the file) an alias[:quant] or
// org/name[:quant] stands for. Errors name the known aliases and the user catalog.
struct HubRef {
  std::string repo, file;
  std::string unsupported;  // a catalog entry Kapitsa cannot run yet: why (QuantEntry::unsupported)
};
Expected<HubRef> hub_ref(const std::string& spec, const Catalog& catalog);

// True for what hub_ref takes (an alias or org/name, with or without :quant): not a path to a folder or file.
bool names_hub_model(const std::string& spec);

// What --model names: a folder with config.json or a .gguf file (as given), or the cached snapshot (or
// the .gguf file in it) of an alias or Hub id. Errors say what was tried and what to run; for a catalog
// entry Kapitsa cannot run yet that is not downloaded, why, and the model's quantizations it can run
// (not the pull command). A downloaded one is passed on: the loader names what it meets.
Expected<std::string> resolve_model(const std::string& spec, const Catalog& catalog);

}  // namespace kapitsa::cli::catalog
