// Catalog parsing, the user's merge patch, the Hub cache lookup and the --model resolver (catalog.h).
#include "cli/catalog/catalog.h"

#include <cstdlib>
#include <fstream>
#include <functional>

namespace kapitsa::cli::catalog {
namespace fs = std::filesystem;

namespace {

const char* kCatalog = "models/catalog.json";

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

fs::path home_dir() { return env("HOME").empty() ? fs::path("/") : fs::path(env("HOME")); }

int int_at(const Json& obj, const char* key) { return obj.is_object() ? obj.value(key, 0) : 0; }

bool is_hub_id(const std::string& s) {
  const size_t slash = s.find('/');
  return slash != std::string::npos && slash > 0 && slash + 1 < s.size() && s.find('/', slash + 1) == std::string::npos;
}

// A file the folder's model.safetensors.index.json names that is not there (another tool's interrupted
// download can leave a snapshot with only some shards), or empty.
std::string missing_shard(const fs::path& folder) {
  std::error_code ec;
  const fs::path index = folder / "model.safetensors.index.json";
  if (!fs::is_regular_file(index, ec)) return {};
  auto j = read_json_file(index.string());
  if (!j.ok() || !j->contains("weight_map") || !(*j)["weight_map"].is_object()) return {};
  for (const auto& [tensor, shard] : (*j)["weight_map"].items())
    if (shard.is_string() && !fs::is_regular_file(folder / shard.get<std::string>(), ec)) return shard.get<std::string>();
  return {};
}

// The Hugging Face CLI writes the same cache, so its command works as well as ours.
std::string pull_hint(const std::string& spec, const std::string& repo, const std::string& file) {
  return fmt::format("download it with: kapitsa pull {}  (or add --pull; or: hf download {}{})", spec, repo,
                     file.empty() ? "" : " " + file);
}

}  // namespace

const QuantEntry* ModelEntry::quant(const std::string& q) const {
  for (const QuantEntry& e : quants)
    if (e.name == q) return &e;
  return nullptr;
}

const ModelEntry* Catalog::find(const std::string& alias) const {
  for (const ModelEntry& m : models)
    if (m.alias == alias) return &m;
  return nullptr;
}

Expected<Catalog> parse_catalog(const Json& json, const std::string& where) {
  if (!json.is_object() || !json.contains("models") || !json["models"].is_object())
    return error("{}: expected an object with a \"models\" object", where);
  const Json quant_defaults = json.value("quantizations", Json::object());
  Catalog out;
  for (const auto& [alias, m] : json["models"].items()) {
    if (!m.is_object()) return error("{}: models.{} is not an object", where, alias);
    ModelEntry e;
    e.alias = alias;
    e.name = m.value("name", alias);
    e.params = m.value("params", 0.0);
    e.active_params = m.value("active_params", e.params);
    e.max_context = m.value("max_context", 0L);
    e.default_quant = m.value("default_quant", std::string());
    const Json a = m.value("attention", Json::object()), g = m.value("gdn", Json::object()),
               mb = m.value("mamba", Json::object());
    ModelShape& s = e.shape;
    s.attention_layers = int_at(a, "layers"), s.kv_heads = int_at(a, "kv_heads"), s.head_dim = int_at(a, "head_dim");
    s.gdn_layers = int_at(g, "layers"), s.gdn_k_heads = int_at(g, "k_heads"), s.gdn_v_heads = int_at(g, "v_heads");
    s.gdn_k_dim = int_at(g, "k_dim"), s.gdn_v_dim = int_at(g, "v_dim");
    s.mamba_layers = int_at(mb, "layers"), s.mamba_heads = int_at(mb, "heads"), s.mamba_head_dim = int_at(mb, "head_dim");
    s.mamba_state = int_at(mb, "state"), s.mamba_groups = int_at(mb, "groups");
    s.conv_kernel = std::max({int_at(g, "conv_kernel"), int_at(mb, "conv_kernel"), 1});
    const Json quants = m.value("quants", Json::object());  // named: items() of a temporary would dangle
    for (const auto& [qname, q] : quants.items()) {
      if (!q.is_object() || !q.contains("repo") || !q["repo"].is_string())
        return error("{}: models.{}.quants.{} needs a \"repo\" string", where, alias, qname);
      QuantEntry qe;
      qe.name = qname;
      qe.repo = q["repo"].get<std::string>();
      qe.file = q.value("file", std::string());
      qe.verified = q.value("verified", false);
      const Json defaults = quant_defaults.value(qname, Json::object());
      qe.bits_per_weight = q.value("bits_per_weight", defaults.value("bits_per_weight", 16.0));
      qe.unsupported = q.value("unsupported", defaults.value("unsupported", std::string()));
      e.quants.push_back(std::move(qe));
    }
    if (e.quants.empty()) return error("{}: models.{} has no quants", where, alias);
    if (e.default_quant.empty() || e.quant(e.default_quant) == nullptr) e.default_quant = e.quants.front().name;
    out.models.push_back(std::move(e));
  }
  return out;
}

std::string cache_folder_name(const std::string& repo) {
  std::string out = "models--";
  for (char c : repo) out += c == '/' ? std::string("--") : std::string(1, c);
  return out;
}

fs::path user_catalog_path() {
  const std::string xdg = env("XDG_CONFIG_HOME");
  return (xdg.empty() ? home_dir() / ".config" : fs::path(xdg)) / "kapitsa" / "models.json";
}

fs::path hub_cache_dir() {
  if (const std::string c = env("HF_HUB_CACHE"); !c.empty()) return c;
  if (const std::string h = env("HF_HOME"); !h.empty()) return fs::path(h) / "hub";
  return home_dir() / ".cache" / "huggingface" / "hub";
}

std::optional<fs::path> find_shipped(const std::string& relative, const std::function<bool(const fs::path&)>& accept) {
  std::vector<fs::path> tried;
  if (const std::string home = env("KAPITSA_HOME"); !home.empty()) tried.push_back(fs::path(home) / relative);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
      tried.push_back(dir / relative);
      tried.push_back(dir / "share" / "kapitsa" / relative);  // installed: PREFIX/bin/kapitsa, PREFIX/share/kapitsa
    }
  tried.push_back(fs::current_path(ec) / relative);
  for (const fs::path& p : tried)
    if (accept(p)) return p;
  return std::nullopt;
}

Expected<Catalog> load_catalog() {
  std::error_code ec;
  Json merged;
  const auto is_file = [](const fs::path& p) { std::error_code e; return fs::is_regular_file(p, e); };
  if (const std::optional<fs::path> shipped = find_shipped(kCatalog, is_file)) {
    KAPITSA_TRY(merged, read_json_file(shipped->string()));
  }
  if (merged.is_null()) merged = Json{{"models", Json::object()}};  // no shipped catalog: the user file alone
  const fs::path user = user_catalog_path();
  if (fs::is_regular_file(user, ec)) {
    KAPITSA_TRY(Json patch, read_json_file(user.string()));
    merged.merge_patch(patch);
  }
  return parse_catalog(merged, fs::is_regular_file(user, ec) ? fmt::format("{} (with {})", kCatalog, user.string()) : kCatalog);
}

std::optional<fs::path> cached_snapshot(const std::string& repo) {
  const fs::path root = hub_cache_dir() / cache_folder_name(repo);
  std::ifstream ref(root / "refs" / "main");
  std::string rev;
  if (!(ref >> rev) || rev.empty()) return std::nullopt;
  const fs::path snap = root / "snapshots" / rev;
  std::error_code ec;
  if (!fs::is_directory(snap, ec)) return std::nullopt;
  return snap;
}

Expected<HubRef> hub_ref(const std::string& spec, const Catalog& catalog) {
  // alias[:quant] or org/name[:quant]
  const size_t colon = spec.rfind(':');
  const std::string base = colon == std::string::npos ? spec : spec.substr(0, colon);
  const std::string quant = colon == std::string::npos ? std::string() : spec.substr(colon + 1);
  HubRef out;
  if (const ModelEntry* m = catalog.find(base)) {
    const QuantEntry* q = m->quant(quant.empty() ? m->default_quant : quant);
    if (q == nullptr) {
      std::string known;
      for (const QuantEntry& e : m->quants) known += (known.empty() ? "" : ", ") + e.name;
      return error("{}: {} has no quantization '{}' in the catalog (known: {})", spec, base, quant, known);
    }
    out.repo = q->repo, out.file = q->file, out.unsupported = q->unsupported;
  } else if (is_hub_id(base)) {
    out.repo = base;
    if (!quant.empty())  // a Hub id with a quantization: the matching catalog entry, if one names this repo
      for (const ModelEntry& m : catalog.models)
        for (const QuantEntry& q : m.quants)
          if (q.repo == base && q.name == quant) out.file = q.file, out.unsupported = q.unsupported;
  } else {
    std::string aliases;
    for (const ModelEntry& m : catalog.models) aliases += (aliases.empty() ? "" : ", ") + m.alias;
    return error("{}: not a folder, a .gguf file, a Hub id (org/name) or a known alias (known: {}; "
                 "add your own in {})",
                 spec, aliases.empty() ? "none" : aliases, user_catalog_path().string());
  }
  return out;
}

bool names_hub_model(const std::string& spec) {
  std::error_code ec;
  return !spec.empty() && !spec.ends_with(".gguf") && !fs::exists(spec, ec) && spec.front() != '.' && spec.front() != '/';
}

Expected<std::string> resolve_model(const std::string& spec, const Catalog& catalog) {
  std::error_code ec;
  if (spec.ends_with(".gguf")) {
    if (fs::is_regular_file(spec, ec)) return spec;
    return error("--model {}: no such .gguf file", spec);
  }
  if (fs::is_directory(spec, ec)) {
    if (fs::is_regular_file(fs::path(spec) / "config.json", ec)) return spec;
    return error("--model {}: no config.json in that folder (give a Hugging Face model folder)", spec);
  }
  auto ref = hub_ref(spec, catalog);
  if (!ref.ok()) return error("--model {}", ref.error().message);
  const std::string repo = ref->repo, file = ref->file;
  const std::optional<fs::path> snap = cached_snapshot(repo);
  if (!snap && !ref->unsupported.empty()) {
    std::string runnable;  // the same model's quantizations Kapitsa can run
    const size_t colon = spec.rfind(':');
    if (const ModelEntry* m = catalog.find(colon == std::string::npos ? spec : spec.substr(0, colon)))
      for (const QuantEntry& q : m->quants)
        if (q.unsupported.empty()) runnable += (runnable.empty() ? "" : ", ") + m->alias + ":" + q.name;
    return error("--model {}: {} is not downloaded, and Kapitsa cannot run it yet: {}{}", spec, repo, ref->unsupported,
                 runnable.empty() ? "" : "; it runs " + runnable);
  }
  if (!snap) return error("--model {}: {} is not downloaded (looked in {}); {}", spec, repo, hub_cache_dir().string(), pull_hint(spec, repo, file));
  const fs::path target = file.empty() ? *snap : *snap / file;
  if (file.empty() ? !fs::is_regular_file(target / "config.json", ec) : !fs::is_regular_file(target, ec))
    return error("--model {}: {} is only partly downloaded ({} missing); {}", spec, repo,
                 file.empty() ? (target / "config.json").string() : target.string(), pull_hint(spec, repo, file));
  if (const std::string shard = file.empty() ? missing_shard(target) : std::string(); !shard.empty())
    return error("--model {}: {} is only partly downloaded ({} missing); {}", spec, repo, (target / shard).string(),
                 pull_hint(spec, repo, file));
  return target.string();
}

}  // namespace kapitsa::cli::catalog
