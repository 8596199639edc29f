// State bytes: a sequence state's contents as plain host bytes and back, for the disk prefix cache
// (runtime/disk_cache.h). Only what the state holds is written — KV of its n_past tokens and its
// recurrent slot — so the bytes do not depend on page size, pool or capacity. Layout, in order:
//   every attention layer l: K rows then V rows of tokens [0, n_past)   [n_past, Hkv, D] pool dtype
//   every recurrent layer l: conv window [K-1, conv_dim] f32, then state [ssm shape] f32
// Device memory (a model on cuda) is copied through the host.
#pragma once

#include "base/status.h"
#include "models/kv_pages.h"
#include "models/model.h"
#include "models/state_slots.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace kapitsa::models {

// Bytes state_to_bytes writes for n_past tokens with these layouts.
size_t state_byte_count(const KvLayout& kv, const RecurrentLayout& recurrent, int64_t n_past);

// The contents of `state` (a HybridState: both families), appended to `out`.
void state_to_bytes(const SequenceState& state, std::vector<std::byte>& out);

// A state of `capacity` tokens (>= n_past) of `model` in `pool` holding `bytes` (state_to_bytes of a
// state of n_past tokens with the same layouts). Errors: a size mismatch (naming both sizes), or a pool
// without n_past tokens' worth of free pages (nothing taken).
Expected<std::unique_ptr<SequenceState>> state_from_bytes(const Model& model, std::shared_ptr<KvPagePool> pool,
                                                          int64_t n_past, int64_t capacity,
                                                          std::span<const std::byte> bytes);

}  // namespace kapitsa::models
