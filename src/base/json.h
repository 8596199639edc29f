// JSON helpers over nlohmann::json for files written by Python tools (config.json and friends):
// bare Infinity / -Infinity / NaN literals (Python's json.dumps writes them) are accepted, and so is
// transformers 5's {"__float__": "Infinity"} form. Errors name the file and the JSON path.
#pragma once

#include "base/status.h"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace kapitsa {

using Json = nlohmann::json;

// Parses text (`where` names it in errors, e.g. the file path). Non-standard float literals become
// {"__float__": "..."} objects, read back by json_number.
Expected<Json> parse_json_lenient(std::string_view text, const std::string& where);
Expected<Json> read_json_file(const std::string& path);

// A number, or a {"__float__": "Infinity"|"-Infinity"|"NaN"} object; anything else is an error naming `field`.
Expected<double> json_number(const Json& value, const std::string& field);

}  // namespace kapitsa
