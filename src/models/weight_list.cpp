// WeightLoader: Linears by name, counted once each (see weight_list.h).
#include "models/weight_list.h"

#include <algorithm>

namespace kapitsa::models {

Expected<Linear> WeightLoader::linear(const std::string& name, const Shape& shape) {
  KAPITSA_TRY(Tensor t, checkpoint_.get(name, shape));
  const Linear l(t);
  count(l);
  return l;
}

void WeightLoader::count(const Linear& linear) {
  if (linear.empty()) return;
  const void* data = linear.weight().data();
  const size_t bytes = linear.nbytes();
  for (Entry& e : entries_)
    if (e.data == data && e.bytes == bytes) {
      e.share = std::max(e.share, share_);
      return;
    }
  entries_.push_back({data, bytes, share_});
}

size_t WeightLoader::bytes_per_token() const {
  double total = 0;
  for (const Entry& e : entries_) total += static_cast<double>(e.bytes) * e.share;
  return static_cast<size_t>(total + 0.5);
}

size_t WeightLoader::resident_bytes() const {
  size_t total = 0;
  for (const Entry& e : entries_) total += e.bytes;
  return total;
}

}  // namespace kapitsa::models
