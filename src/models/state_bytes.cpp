// A HybridState's KV rows and recurrent slot to host bytes and back (see state_bytes.h).
#include "models/state_bytes.h"

#include "models/hybrid_state.h"
#include "ops/memory.h"

#include <algorithm>
#include <cstring>

namespace kapitsa::models {
namespace {

size_t token_row_bytes(const KvLayout& kv) {  // one token's K (or V) in one layer
  return static_cast<size_t>(kv.n_kv_heads * kv.head_dim) * dtype_size(kv.dtype);
}

// Calls f(array, page, first_token, tokens) for every run of a state's tokens that lies in one page of
// one layer's K or V array, in the order of the byte layout.
template <typename F>
void for_each_kv_run(const KvPagePool& pool, std::span<const int32_t> pages, int64_t n_past, F&& f) {
  const int64_t P = pool.page_tokens();
  for (int64_t l = 0; l < pool.layout().n_layers; ++l)
    for (const Tensor& array : {pool.k(l), pool.v(l)})
      for (int64_t first = 0; first < n_past; first += P)
        f(array, pages[static_cast<size_t>(first / P)], std::min(P, n_past - first));
}

}  // namespace

size_t state_byte_count(const KvLayout& kv, const RecurrentLayout& recurrent, int64_t n_past) {
  return 2 * static_cast<size_t>(kv.n_layers * n_past) * token_row_bytes(kv) + recurrent.bytes_per_slot();
}

void state_to_bytes(const SequenceState& state, std::vector<std::byte>& out) {
  const auto& s = dynamic_cast<const HybridState&>(state);
  const KvPagePool& pool = s.pool();
  const RecurrentLayout& rec = s.slots().layout();
  const size_t start = out.size();
  out.resize(start + state_byte_count(pool.layout(), rec, s.n_past()));
  std::byte* dst = out.data() + start;
  const size_t row = token_row_bytes(pool.layout());
  const Device kv_device = pool.layout().device;
  for_each_kv_run(pool, s.kv_pages(), s.n_past(), [&](const Tensor& array, int32_t page, int64_t tokens) {
    const size_t bytes = static_cast<size_t>(tokens) * row;
    const auto* src = static_cast<const std::byte*>(array.data()) + static_cast<size_t>(page * pool.page_tokens()) * row;
    ops::copy_bytes(dst, Device::cpu, src, kv_device, bytes, /*wait=*/false);
    dst += bytes;
  });
  if (s.state_slot() >= 0) {
    const size_t conv = static_cast<size_t>(rec.conv_window.numel()) * sizeof(float);
    const size_t ssm = static_cast<size_t>(rec.ssm.numel()) * sizeof(float);
    const auto slot = static_cast<size_t>(s.state_slot());
    for (int64_t l = 0; l < rec.n_layers; ++l) {
      ops::copy_bytes(dst, Device::cpu, static_cast<const std::byte*>(s.slots().conv(l).data()) + slot * conv,
                      rec.device, conv, false);
      dst += conv;
      ops::copy_bytes(dst, Device::cpu, static_cast<const std::byte*>(s.slots().ssm(l).data()) + slot * ssm,
                      rec.device, ssm, false);
      dst += ssm;
    }
  }
  ops::synchronize(kv_device);
  ops::synchronize(rec.device);
  KAPITSA_CHECK(dst == out.data() + out.size(), "state bytes: wrote {} of {}", dst - (out.data() + start),
                out.size() - start);
}

Expected<std::unique_ptr<SequenceState>> state_from_bytes(const Model& model, std::shared_ptr<KvPagePool> pool,
                                                          int64_t n_past, int64_t capacity,
                                                          std::span<const std::byte> bytes) {
  if (n_past < 0 || capacity < n_past) return error("state bytes: {} tokens do not fit a capacity of {}", n_past, capacity);
  std::unique_ptr<SequenceState> made = model.new_state(capacity, std::move(pool));
  auto* s = dynamic_cast<HybridState*>(made.get());
  if (s == nullptr) return error("state bytes: this model's states cannot be restored");
  const RecurrentLayout& rec = s->slots().layout();
  const size_t expected = state_byte_count(s->pool().layout(), rec, n_past);
  if (bytes.size() != expected)
    return error("state bytes: {} bytes for {} tokens, this model's state of them has {}", bytes.size(), n_past, expected);
  if (!s->prepare_kv(n_past))
    return error("the KV page pool is full: restoring {} tokens needs {} pages, {} are free", n_past,
                 s->pool().pages_for(n_past), s->pool().free_pages());
  const KvPagePool& kv = s->pool();
  const size_t row = token_row_bytes(kv.layout());
  const std::byte* src = bytes.data();
  for_each_kv_run(kv, s->kv_pages(), n_past, [&](const Tensor& array, int32_t page, int64_t tokens) {
    const size_t n = static_cast<size_t>(tokens) * row;
    auto* dst = static_cast<std::byte*>(array.data()) + static_cast<size_t>(page * kv.page_tokens()) * row;
    ops::copy_bytes(dst, kv.layout().device, src, Device::cpu, n);
    src += n;
  });
  if (s->state_slot() >= 0) {
    const size_t conv = static_cast<size_t>(rec.conv_window.numel()) * sizeof(float);
    const size_t ssm = static_cast<size_t>(rec.ssm.numel()) * sizeof(float);
    const auto slot = static_cast<size_t>(s->state_slot());
    for (int64_t l = 0; l < rec.n_layers; ++l) {
      ops::copy_bytes(static_cast<std::byte*>(s->slots().conv(l).data()) + slot * conv, rec.device, src, Device::cpu, conv);
      src += conv;
      ops::copy_bytes(static_cast<std::byte*>(s->slots().ssm(l).data()) + slot * ssm, rec.device, src, Device::cpu, ssm);
      src += ssm;
    }
  }
  s->advance(n_past);
  return made;
}

}  // namespace kapitsa::models
