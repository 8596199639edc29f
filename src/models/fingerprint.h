// Model fingerprint: what identifies a loaded model's numbers well enough to reuse states it computed
// (the disk prefix cache, runtime/disk_cache.h). Hashed (FNV-1a 64): config.json's bytes; for every
// *.safetensors file of the folder, in name order, its name, size, modification time (ns) and header
// (the JSON that names every tensor with its dtype, shape and offsets); and the LoadOptions that change
// the numbers (RoPE frequency rounding). Weights are not read: hashing gigabytes at every start would
// cost more than the cache saves. The modification time stands in for the content: a checkpoint
// rewritten in place with the same tensor names and shapes changes it, and a copy that does not keep it
// only costs cache misses. Not the device or the KV dtype (cache entries record and check the latter).
// A .gguf path: the file's name, size, time and first MiB (fingerprint.cpp).
#pragma once

#include "base/status.h"
#include "models/model.h"

#include <cstdint>
#include <string>

namespace kapitsa::models {

// Errors name the file that could not be read.
Expected<uint64_t> model_fingerprint(const std::string& dir, const LoadOptions& options = {});

}  // namespace kapitsa::models
