// HfConfig: typed, error-reporting access to a Hugging Face config.json (or a nested section of it,
// e.g. Qwen3.5's text_config). Unknown fields are ignored; Infinity/NaN literals are accepted.
// A missing or mistyped required field is an Error naming the file and the dotted field path.
// Knows no model architecture: each model's config.cpp decides which fields it needs.
#pragma once

#include "base/json.h"
#include "base/status.h"

#include <optional>
#include <string>
#include <vector>

namespace kapitsa::weights {

class HfConfig {
 public:
  static Expected<HfConfig> load(const std::string& model_dir);  // reads MODEL_DIR/config.json
  static HfConfig from_json(Json json, std::string path, std::string prefix = "");

  const Json& json() const { return json_; }
  const std::string& path() const { return path_; }
  bool has(const std::string& key) const;  // present and not null

  // Nested object `key` (e.g. "text_config"), or an error if absent / not an object.
  Expected<HfConfig> section(const std::string& key) const;

  Expected<int64_t> get_int(const std::string& key) const;
  Expected<double> get_float(const std::string& key) const;
  Expected<std::string> get_string(const std::string& key) const;
  Expected<bool> get_bool(const std::string& key) const;
  Expected<std::vector<int64_t>> get_int_list(const std::string& key) const;
  Expected<std::vector<std::string>> get_string_list(const std::string& key) const;
  Expected<std::vector<double>> get_float_list(const std::string& key) const;

  // Optional fields: the default when absent or null; an error when present with the wrong type.
  Expected<int64_t> get_int(const std::string& key, int64_t fallback) const;
  Expected<double> get_float(const std::string& key, double fallback) const;
  Expected<bool> get_bool(const std::string& key, bool fallback) const;

  // "config.json: field 'text_config.hidden_size'" — for errors raised by callers.
  std::string where(const std::string& key) const;

 private:
  Json json_;
  std::string path_;
  std::string prefix_;  // dotted path of this section ("" at top level)
};

}  // namespace kapitsa::weights
