// libFuzzer target: a GGUF file (weights/gguf.cpp) and the model view built from it
// (models/gguf_checkpoint.cpp: metadata → config, tensor renames, the V-head reordering). The input is
// the whole file. Opening must fail with an error that says why, or give tensors whose every byte lies
// inside the file (read here, and the first row of each supported block type decoded by ref).
#include "fuzz_common.h"
#include "models/gguf_checkpoint.h"
#include "ops/ref/ref.h"
#include "weights/gguf.h"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kapitsa::fuzz::MemoryFile file({reinterpret_cast<const char*>(data), size});
  auto opened = kapitsa::weights::GgufFile::open(file.path());
  if (!opened.ok()) {
    if (opened.error().message.empty()) std::abort();  // every refusal says why
    return 0;
  }
  const auto& gguf = **opened;
  uint64_t sum = 0;
  std::vector<float> row;
  for (const auto& [name, t] : gguf.tensors()) {
    if (t.begin + t.nbytes > size) std::abort();
    const uint8_t* bytes = gguf.data(t);
    for (size_t i = 0; i < t.nbytes; ++i) sum += bytes[i];
    if (kapitsa::ggml_type_supported(t.type) && !t.shape.empty() && t.numel() > 0) {
      row.resize(static_cast<size_t>(t.shape.back()));
      kapitsa::ops::ref::dequantize_ggml(t.type, bytes, t.shape.back(), row.data());
    }
  }
  kapitsa::fuzz::keep(sum);
  auto model = kapitsa::models::open_gguf_checkpoint(file.path());
  if (!model.ok() && model.error().message.empty()) std::abort();
  return 0;
}
