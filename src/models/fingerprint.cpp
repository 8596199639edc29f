// Model fingerprint from config.json, the safetensors files' names, sizes, times and headers (see
// fingerprint.h).
#include "models/fingerprint.h"

#include "base/hash.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace kapitsa::models {

namespace fs = std::filesystem;

namespace {

// A file's identity without reading its data: name, size and modification time, hashed into h.
Expected<uint64_t> hash_file_identity(const fs::path& file, uint64_t h, uintmax_t& size) {
  std::error_code ec;
  size = fs::file_size(file, ec);
  const auto mtime = fs::last_write_time(file, ec);
  if (ec) return error("{}: cannot stat it to fingerprint the model: {}", file.string(), ec.message());
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(mtime.time_since_epoch()).count();
  h = fnv1a(file.filename().string(), h);
  const uint64_t identity[2] = {static_cast<uint64_t>(size), static_cast<uint64_t>(ns)};
  return fnv1a_values(std::span<const uint64_t>(identity), h);
}

// A .gguf file (and nothing else: its metadata is the config): name, size, modification time and its
// first MiB (the metadata and tensor table of a model file, bounded for huge tokenizers).
Expected<uint64_t> gguf_fingerprint(const fs::path& file, uint64_t h) {
  uintmax_t size = 0;
  KAPITSA_TRY(h, hash_file_identity(file, h, size));
  std::ifstream f(file, std::ios::binary);
  std::string head(static_cast<size_t>(std::min<uintmax_t>(size, 1u << 20)), '\0');
  if (!f.read(head.data(), static_cast<std::streamsize>(head.size()))) return error("{}: cannot read its header", file.string());
  return fnv1a(head, h);
}

}  // namespace

Expected<uint64_t> model_fingerprint(const std::string& dir, const LoadOptions& options) {
  uint64_t h = fnv1a("kapitsa model fingerprint v1");
  if (dir.ends_with(".gguf")) {
    KAPITSA_TRY(h, gguf_fingerprint(dir, h));
    return fnv1a(options.rope_bf16_frequencies ? "rope:bf16" : "rope:f32", h);
  }
  const fs::path config = fs::path(dir) / "config.json";
  std::ifstream in(config, std::ios::binary);
  if (!in) return error("{}: cannot read it to fingerprint the model", config.string());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  h = fnv1a(text, h);

  std::vector<fs::path> files;
  std::error_code ec;
  for (const fs::directory_entry& item : fs::directory_iterator(dir, ec))
    if (item.path().extension() == ".safetensors") files.push_back(item.path());
  if (ec) return error("{}: cannot list it to fingerprint the model: {}", dir, ec.message());
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    uintmax_t size = 0;
    KAPITSA_TRY(h, hash_file_identity(file, h, size));
    // The header: an 8-byte little-endian length, then that much JSON (bounded: a corrupt length
    // must not make us read gigabytes; the loader reports such files).
    std::ifstream f(file, std::ios::binary);
    uint64_t n = 0;
    if (!f.read(reinterpret_cast<char*>(&n), sizeof n)) return error("{}: cannot read its header", file.string());
    std::string header(static_cast<size_t>(std::min<uint64_t>(n, std::min<uint64_t>(size, 100u << 20))), '\0');
    f.read(header.data(), static_cast<std::streamsize>(header.size()));
    h = fnv1a(std::string_view(header.data(), static_cast<size_t>(f.gcount())), h);
  }
  h = fnv1a(options.rope_bf16_frequencies ? "rope:bf16" : "rope:f32", h);
  return h;
}

}  // namespace kapitsa::models
