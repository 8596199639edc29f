// Model defaults shared by every architecture.
#include "models/model.h"

namespace kapitsa::models {

Status Model::forward_batch(std::span<const BatchItem> items) const {
  for (const BatchItem& item : items) {
    if (item.state == nullptr) return error("forward_batch: an item has no state");
    if (item.ids.empty()) return error("forward_batch: an item has no tokens");
    if (item.state->n_past() + static_cast<int64_t>(item.ids.size()) > item.state->capacity())
      return error("sequence of {} tokens exceeds its state's capacity of {}",
                   item.state->n_past() + static_cast<int64_t>(item.ids.size()), item.state->capacity());
    for (int32_t id : item.ids)
      if (id < 0 || id >= info().vocab_size) return error("token id {} is outside the vocabulary [0, {})", id, info().vocab_size);
  }
  for (const BatchItem& item : items) KAPITSA_RETURN_IF_ERROR(forward(item.ids, *item.state, item.logits));
  return ok_status();
}

std::shared_ptr<KvPagePool> Model::default_kv_pool() const {
  std::lock_guard lock(default_pool_mu_);
  if (!default_pool_) default_pool_ = std::make_shared<KvPagePool>(kv_layout());
  return default_pool_;
}

}  // namespace kapitsa::models
