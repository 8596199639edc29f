// WeightLoader: matrices by name, counted once each (see weight_list.h).
#include "models/weight_list.h"

#include <algorithm>

namespace kapitsa::models {

Expected<Tensor> WeightLoader::matrix(const std::string& name, const Shape& shape) {
  KAPITSA_TRY(Tensor t, checkpoint_.get(name, shape));
  count(t);
  return t;
}

void WeightLoader::count(const Tensor& matrix) {
  if (matrix.empty()) return;
  for (Entry& e : entries_)
    if (e.data == matrix.data() && e.bytes == matrix.nbytes()) {
      e.share = std::max(e.share, share_);
      return;
    }
  entries_.push_back({matrix.data(), matrix.nbytes(), share_});
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
