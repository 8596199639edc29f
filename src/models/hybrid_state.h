// HybridState: the per-sequence memory of a hybrid model, written once for both families — per layer
// either an attention KV cache or a recurrent state (conv window + f32 SSM/DeltaNet state; Recurrent is
// GdnState or Mamba2State, both {conv_window, ssm}). Deep copies for snapshots; resized() keeps the
// KV rows already written and copies recurrent state whole.
#pragma once

#include "models/layers/attention.h"
#include "models/model.h"

#include <cstring>
#include <memory>
#include <optional>
#include <vector>

namespace kapitsa::models {

template <typename Recurrent>
class HybridState final : public SequenceState {
 public:
  std::vector<std::optional<KvCache>> kv;            // per layer (attention layers only)
  std::vector<std::optional<Recurrent>> recurrent;  // per layer (recurrent layers only)

  explicit HybridState(int64_t capacity) { capacity_ = capacity; }

  size_t bytes() const override {
    size_t total = 0;
    for (const auto& c : kv)
      if (c) total += c->k.tensor().nbytes() + c->v.tensor().nbytes();
    for (const auto& s : recurrent)
      if (s) total += s->conv_window.tensor().nbytes() + s->ssm.tensor().nbytes();
    return total;
  }

  std::unique_ptr<SequenceState> clone() const override { return copy_with_capacity(capacity_); }

  std::unique_ptr<SequenceState> resized(int64_t capacity) const override {
    if (capacity < n_past_) return nullptr;
    return copy_with_capacity(capacity);
  }

  void advance(int64_t n) { n_past_ += n; }

 private:
  std::unique_ptr<HybridState> copy_with_capacity(int64_t capacity) const {
    auto copy = std::make_unique<HybridState>(capacity);
    copy->n_past_ = n_past_;
    // KV rows [0, n_past) carry over; rows past them are never read before being written.
    auto rows = [&](const Buffer& b) {
      const Tensor& t = b.tensor();
      Buffer out = Buffer::allocate(DType::f32, {capacity, t.dim(1), t.dim(2)});
      std::memcpy(out.tensor().data(), t.data(),
                  static_cast<size_t>(n_past_) * static_cast<size_t>(t.dim(1) * t.dim(2)) * sizeof(float));
      return out;
    };
    for (const auto& c : kv) copy->kv.push_back(c ? std::optional<KvCache>(KvCache{rows(c->k), rows(c->v)}) : std::nullopt);
    for (const auto& s : recurrent)
      copy->recurrent.push_back(
          s ? std::optional<Recurrent>(Recurrent{Buffer::copy_of(s->conv_window), Buffer::copy_of(s->ssm)}) : std::nullopt);
    return copy;
  }
};

}  // namespace kapitsa::models
