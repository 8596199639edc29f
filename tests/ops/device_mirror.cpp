// The op tests' reach into device backends (op_test_helpers.h): DeviceMirror, which mirrors an op
// call's host tensors on a device and brings results back, and device_memory(), the allocation and
// copies of each device backend compiled in (cuda when KAPITSA_HAVE_CUDA).
#include "op_test_helpers.h"

#if KAPITSA_HAVE_CUDA
#include "ops/cuda/device_buffer.h"
#endif

#include <algorithm>
#include <vector>

namespace kapitsa::ops::test {

#if KAPITSA_HAVE_CUDA
namespace {
const DeviceMemory kCudaMemory{
    [](size_t bytes) {
      auto buffer = std::make_shared<cuda::DeviceBuffer>(
          cuda::DeviceBuffer::allocate(DType::u8, {static_cast<int64_t>(bytes)}));
      return std::shared_ptr<void>(buffer, buffer->tensor().data());  // owns the buffer, points at its bytes
    },
    cuda::copy_to_device,
    cuda::copy_to_host,
};
}  // namespace
#endif

const DeviceMemory* device_memory(const BackendTable& b) {
#if KAPITSA_HAVE_CUDA
  if (b.device == Device::cuda) return &kCudaMemory;
#endif
  (void)b;
  return nullptr;
}

void DeviceMirror::note(const Tensor& t) {
  if (t.data() == nullptr || t.nbytes() == 0) return;
  KAPITSA_CHECK(t.device() == Device::cpu, "DeviceMirror: argument {} is not host memory", t.shape().str());
  const auto begin = reinterpret_cast<uintptr_t>(t.data());
  ranges_.push_back({begin, begin + t.nbytes(), nullptr});
}

void DeviceMirror::upload() {
  std::sort(ranges_.begin(), ranges_.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  std::vector<Range> merged;
  for (const Range& r : ranges_) {
    if (!merged.empty() && r.begin < merged.back().end) merged.back().end = std::max(merged.back().end, r.end);
    else merged.push_back(r);
  }
  for (Range& r : merged) {
    const size_t bytes = r.end - r.begin;
    r.device = m_.allocate(bytes);
    m_.upload(r.device.get(), reinterpret_cast<const void*>(r.begin), bytes);
  }
  ranges_ = std::move(merged);
}

Tensor DeviceMirror::view(const Tensor& t) const {
  if (t.data() == nullptr) return t.rank() == 0 ? t : Tensor(t.dtype(), t.shape(), nullptr, Device::cuda);
  if (t.nbytes() == 0) return Tensor(t.dtype(), t.shape(), nullptr, Device::cuda);
  const auto begin = reinterpret_cast<uintptr_t>(t.data());
  for (const Range& r : ranges_)
    if (r.begin <= begin && begin < r.end)
      return Tensor(t.dtype(), t.shape(), static_cast<uint8_t*>(r.device.get()) + (begin - r.begin), Device::cuda);
  KAPITSA_CHECK(false, "DeviceMirror: tensor {} was not noted before upload", t.shape().str());
  return t;
}

void DeviceMirror::download() const {
  std::vector<uint8_t> back;
  for (const Range& r : ranges_) {
    const size_t bytes = r.end - r.begin;
    back.resize(bytes);
    m_.download(back.data(), r.device.get(), bytes);
    auto* host = reinterpret_cast<uint8_t*>(r.begin);
    if (std::memcmp(host, back.data(), bytes) != 0) std::memcpy(host, back.data(), bytes);
  }
}

}  // namespace kapitsa::ops::test
