// `kapitsa bench`'s measurements through the Engine, on random token ids (the model's own text does
// not change the arithmetic): prefill of N tokens, batch-1 decode, time to first token at long
// contexts (those past the model's context are reported as skipped), aggregate decode of several
// sequences (over the window in which all of them decode) and batch-1 decode with n-gram speculation
// on and off on a repetitive prompt (same greedy output either way; the acceptance is reported).
#pragma once

#include "base/json.h"
#include "base/status.h"
#include "tensor/tensor.h"

#include <functional>
#include <string>
#include <vector>

namespace kapitsa::cli::bench {

struct SuiteOptions {
  int prompt = 512;                          // prefill tokens
  int decode = 128;                          // decoded tokens at batch 1 (and per sequence)
  std::vector<int64_t> ttft = {4096, 16384};  // contexts for time to first token
  int sequences = 4;                         // for aggregate decode
  bool speculation = true;                   // n-gram on/off comparison
  int spec_k = 4;
  std::string kv_dtype = "bf16";
  Device device = Device::cpu;
};

// Runs every measurement on the model folder `dir`; `log` gets a line as each starts. The JSON holds
// one object per measurement (see bench.cpp for the table).
Expected<Json> run_suite(const std::string& dir, const SuiteOptions& options, const std::function<void(const std::string&)>& log);

}  // namespace kapitsa::cli::bench
