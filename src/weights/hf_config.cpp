// HfConfig implementation.
#include "weights/hf_config.h"

#include <filesystem>

namespace kapitsa::weights {

Expected<HfConfig> HfConfig::load(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  if (!std::filesystem::exists(path)) return error("{}: not found (is '{}' a model folder?)", path, model_dir);
  KAPITSA_TRY(Json json, read_json_file(path));
  if (!json.is_object()) return error("{}: expected a JSON object at the top level", path);
  return from_json(std::move(json), path);
}

HfConfig HfConfig::from_json(Json json, std::string path, std::string prefix) {
  HfConfig c;
  c.json_ = std::move(json);
  c.path_ = std::move(path);
  c.prefix_ = std::move(prefix);
  return c;
}

bool HfConfig::has(const std::string& key) const { return json_.contains(key) && !json_[key].is_null(); }

std::string HfConfig::where(const std::string& key) const { return fmt::format("{}: field '{}{}'", path_, prefix_, key); }

Expected<HfConfig> HfConfig::section(const std::string& key) const {
  if (!has(key)) return error("{} is missing", where(key));
  if (!json_[key].is_object()) return error("{} must be an object", where(key));
  return from_json(json_[key], path_, prefix_ + key + ".");
}

Expected<int64_t> HfConfig::get_int(const std::string& key) const {
  if (!has(key)) return error("{} is required but missing", where(key));
  const Json& v = json_[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())))
    return static_cast<int64_t>(v.get<double>());
  return error("{} must be an integer, got {}", where(key), v.dump());
}

Expected<double> HfConfig::get_float(const std::string& key) const {
  if (!has(key)) return error("{} is required but missing", where(key));
  return json_number(json_[key], where(key));
}

Expected<std::string> HfConfig::get_string(const std::string& key) const {
  if (!has(key)) return error("{} is required but missing", where(key));
  if (!json_[key].is_string()) return error("{} must be a string, got {}", where(key), json_[key].dump());
  return json_[key].get<std::string>();
}

Expected<bool> HfConfig::get_bool(const std::string& key) const {
  if (!has(key)) return error("{} is required but missing", where(key));
  if (!json_[key].is_boolean()) return error("{} must be true or false, got {}", where(key), json_[key].dump());
  return json_[key].get<bool>();
}

Expected<std::vector<int64_t>> HfConfig::get_int_list(const std::string& key) const {
  if (!has(key)) return error("{} is required but missing", where(key));
  if (!json_[key].is_array()) return error("{} must be a list of integers", where(key));
  std::vector<int64_t> out;
  for (const auto& v : json_[key]) {
    if (!v.is_number_integer()) return error("{} must be a list of integers, found {}", where(key), v.dump());
    out.push_back(v.get<int64_t>());
  }
  return out;
}

Expected<std::vector<std::string>> HfConfig::get_string_list(const std::string& key) const {
  if (!has(key)) return error("{} is required but missing", where(key));
  if (!json_[key].is_array()) return error("{} must be a list of strings", where(key));
  std::vector<std::string> out;
  for (const auto& v : json_[key]) {
    if (!v.is_string()) return error("{} must be a list of strings, found {}", where(key), v.dump());
    out.push_back(v.get<std::string>());
  }
  return out;
}

Expected<std::vector<double>> HfConfig::get_float_list(const std::string& key) const {
  if (!has(key)) return error("{} is required but missing", where(key));
  if (!json_[key].is_array()) return error("{} must be a list of numbers", where(key));
  std::vector<double> out;
  for (const auto& v : json_[key]) {
    KAPITSA_TRY(double d, json_number(v, where(key)));
    out.push_back(d);
  }
  return out;
}

Expected<int64_t> HfConfig::get_int(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : Expected<int64_t>(fallback);
}
Expected<double> HfConfig::get_float(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : Expected<double>(fallback);
}
Expected<bool> HfConfig::get_bool(const std::string& key, bool fallback) const {
  return has(key) ? get_bool(key) : Expected<bool>(fallback);
}

}  // namespace kapitsa::weights
