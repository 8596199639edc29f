// libFuzzer target: a .safetensors file's header and layout (weights/safetensors.cpp). The input is
// the whole file. Opening must either fail with an error or give entries whose every byte lies inside
// the file (read here, so an offset past the end faults instead of passing silently).
#include "fuzz_common.h"
#include "weights/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kapitsa::fuzz::MemoryFile file({reinterpret_cast<const char*>(data), size});
  auto opened = kapitsa::weights::SafetensorsFile::open(file.path());
  if (!opened.ok()) {
    if (opened.error().message.empty()) std::abort();  // every refusal says why
    return 0;
  }
  const auto& st = **opened;
  uint64_t sum = 0;
  for (const auto& [name, entry] : st.entries()) {
    if (entry.begin + entry.nbytes > size) std::abort();
    const uint8_t* bytes = st.data(entry);
    for (size_t i = 0; i < entry.nbytes; ++i) sum += bytes[i];
  }
  kapitsa::fuzz::keep(sum);
  return 0;
}
