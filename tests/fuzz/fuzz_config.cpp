// libFuzzer target: config.json as the model loaders read it — JSON parsing, the typed HfConfig
// accessors, each family's parse_config (Qwen3.5/Qwen3-Next, Nemotron-H) and the quantization section.
// Any outcome but an error with a message or a parsed config (crash, hang, huge allocation) is a finding.
#include "base/json.h"
#include "models/nemotron_h/config.h"
#include "models/quantization.h"
#include "models/qwen35/config.h"
#include "weights/hf_config.h"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto json = kapitsa::Json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  const auto config = kapitsa::weights::HfConfig::from_json(std::move(json), "config.json");
  const auto check = [](const auto& result) {
    if (!result.ok() && result.error().message.empty()) std::abort();
  };
  check(kapitsa::models::qwen35::parse_config(config));
  check(kapitsa::models::nemotron_h::parse_config(config));
  check(kapitsa::models::parse_quantization(config));
  return 0;
}
