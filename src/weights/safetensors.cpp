// Safetensors reading and validation; checkpoint folders (single, sharded, globbed).
#include "weights/safetensors.h"

#include "base/json.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <cmath>
#include <limits>
#include <random>
#include <thread>

namespace kapitsa::weights {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // as the reference reader

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + "]";
}

Expected<TensorEntry> parse_entry(const std::string& path, const std::string& name, const Json& value,
                                  uint64_t data_size, size_t data_start) {
  if (!value.is_object()) return error("{}: tensor '{}': header entry is not an object", path, name);
  if (!value.contains("dtype") || !value["dtype"].is_string())
    return error("{}: tensor '{}': missing or non-string 'dtype'", path, name);
  if (!value.contains("shape") || !value["shape"].is_array())
    return error("{}: tensor '{}': missing or non-array 'shape'", path, name);
  if (!value.contains("data_offsets") || !value["data_offsets"].is_array() || value["data_offsets"].size() != 2)
    return error("{}: tensor '{}': 'data_offsets' must be an array [begin, end]", path, name);

  TensorEntry entry;
  entry.name = name;
  const std::string dtype_text = value["dtype"].get<std::string>();
  auto dtype = dtype_from_name(dtype_text);
  if (!dtype) return error("{}: tensor '{}': unsupported dtype '{}'", path, name, dtype_text);
  entry.dtype = *dtype;

  // numel with overflow checks: a malicious header must not wrap around.
  uint64_t numel = 1;
  for (const auto& d : value["shape"]) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
      return error("{}: tensor '{}': shape {} has a non-integer or negative dimension", path, name, value["shape"].dump());
    const uint64_t dim = d.get<uint64_t>();
    if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / dim)
      return error("{}: tensor '{}': shape {} overflows", path, name, value["shape"].dump());
    numel *= dim;
    entry.shape.push_back(static_cast<int64_t>(dim));
  }
  const auto& offsets = value["data_offsets"];
  if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
    return error("{}: tensor '{}': data_offsets must be non-negative integers", path, name);
  const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  if (begin > end) return error("{}: tensor '{}': data_offsets [{}, {}] run backwards", path, name, begin, end);
  if (end > data_size)
    return error("{}: tensor '{}': data_offsets [{}, {}] reach beyond the end of the file (data section is {} bytes)",
                 path, name, begin, end, data_size);
  const uint64_t size = dtype_size(entry.dtype);
  if (numel > std::numeric_limits<uint64_t>::max() / size || numel * size != end - begin)
    return error("{}: tensor '{}': shape {} × {} needs {} bytes but data_offsets give {}", path, name,
                 shape_string(entry.shape), dtype_text, numel * size, end - begin);
  entry.begin = data_start + begin;
  entry.nbytes = end - begin;
  return entry;
}

}  // namespace

Expected<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  auto result = std::make_unique<SafetensorsFile>();
  KAPITSA_TRY(result->file_, MappedFile::open(path));
  const auto bytes = result->file_.bytes();
  if (bytes.size() < 8) return error("{}: truncated: {} bytes, too short for a safetensors header", path, bytes.size());
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);  // little-endian on every platform we build for
  if (header_len > kMaxHeaderBytes) return error("{}: header length {} exceeds the 100 MB limit", path, header_len);
  if (8 + header_len > bytes.size())
    return error("{}: truncated: header claims {} bytes but the file has only {} after the length", path, header_len,
                 bytes.size() - 8);
  const std::string_view header(reinterpret_cast<const char*>(bytes.data() + 8), header_len);
  if (header.empty() || header.front() != '{') return error("{}: header is not a JSON object", path);
  Json json;
  try {
    json = Json::parse(header);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for a number too large
    return error("{}: malformed header JSON: {}", path, e.what());
  }
  if (!json.is_object()) return error("{}: header is not a JSON object", path);

  const size_t data_start = 8 + header_len;
  const uint64_t data_size = bytes.size() - data_start;
  std::vector<const TensorEntry*> by_offset;
  for (const auto& [name, value] : json.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) return error("{}: __metadata__ is not an object", path);
      for (const auto& [k, v] : value.items())
        result->metadata_[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    KAPITSA_TRY(TensorEntry entry, parse_entry(path, name, value, data_size, data_start));
    auto [it, inserted] = result->entries_.emplace(name, std::move(entry));
    by_offset.push_back(&it->second);
  }

  // Tensors must tile the data section exactly: no overlaps, no holes (empty tensors excepted).
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorEntry* a, const TensorEntry* b) { return a->begin < b->begin || (a->begin == b->begin && a->nbytes < b->nbytes); });
  size_t cursor = data_start;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry* e : by_offset) {
    if (e->nbytes == 0) continue;
    if (e->begin < cursor)
      return error("{}: tensors '{}' and '{}' overlap (bytes {}..{} and {}..{} of the data section)", path,
                   previous->name, e->name, previous->begin - data_start, cursor - data_start, e->begin - data_start,
                   e->begin + e->nbytes - data_start);
    if (e->begin > cursor)
      return error("{}: {} unused bytes before tensor '{}' (offset {}): the data section has a hole", path,
                   e->begin - cursor, e->name, e->begin - data_start);
    cursor = e->begin + e->nbytes;
    previous = e;
  }
  if (cursor != bytes.size())
    return error("{}: {} bytes after the last tensor are not described by the header", path, bytes.size() - cursor);
  return result;
}

Expected<Checkpoint> Checkpoint::open(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path index_path = fs::path(path) / "model.safetensors.index.json";
    if (fs::exists(index_path)) {
      KAPITSA_TRY(Json index, read_json_file(index_path.string()));
      if (!index.contains("weight_map") || !index["weight_map"].is_object())
        return error("{}: missing 'weight_map' object", index_path.string());
      for (const auto& [tensor, file] : index["weight_map"].items()) {
        if (!file.is_string()) return error("{}: weight_map['{}'] is not a file name", index_path.string(), tensor);
        const std::string name = file.get<std::string>();
        if (name.find('/') != std::string::npos || name.find("..") != std::string::npos)
          return error("{}: weight_map['{}'] names '{}', which is outside the folder", index_path.string(), tensor, name);
        const std::string full = (fs::path(path) / name).string();
        if (std::find(files.begin(), files.end(), full) == files.end()) files.push_back(full);
      }
    } else {
      for (const auto& item : fs::directory_iterator(path, ec))
        if (item.path().extension() == ".safetensors" && item.path().filename().string().rfind("model", 0) == 0)
          files.push_back(item.path().string());
      std::sort(files.begin(), files.end());
    }
    if (files.empty()) return error("{}: no model*.safetensors files and no model.safetensors.index.json", path);
  } else if (fs::exists(path, ec)) {
    files.push_back(path);
  } else {
    return error("{}: no such file or folder", path);
  }

  Checkpoint checkpoint;
  for (const auto& file : files) {
    KAPITSA_TRY(std::unique_ptr<SafetensorsFile> opened, SafetensorsFile::open(file));
    std::shared_ptr<SafetensorsFile> shared(std::move(opened));
    for (const auto& [name, entry] : shared->entries()) {
      if (checkpoint.index_.count(name))
        return error("{}: tensor '{}' also appears in {}", file, name, checkpoint.file_of(name));
      checkpoint.index_[name] = Location{shared->data(entry), &entry, &shared->path()};
    }
    checkpoint.files_.push_back(std::move(shared));
  }
  return checkpoint;
}

// ---- synthesized checkpoints (random models) ----------------------------------------------------

// Large weight matrices (a multi-GB benchmark checkpoint) are filled on every core from a counter-based
// hash instead of the sequential mt19937 stream, which took minutes for a 4B-parameter shape (device time
// on the GPU machine). Each value is an Irwin-Hall sum of four 16-bit uniforms, scaled to unit variance:
// close to normal, bounded at ±3.46σ, which is all random benchmark weights need. Small tensors (every
// test model's) keep the sequential stream, so their values are unchanged.
namespace {

constexpr int64_t kParallelFillMin = int64_t{1} << 22;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void fill_normal_parallel(uint16_t* out, int64_t n, uint64_t seed, float scale) {
  const int64_t n_threads = std::max(1u, std::min(64u, std::thread::hardware_concurrency()));
  const int64_t chunk = (n + n_threads - 1) / n_threads;
  const float unit_variance = scale * std::sqrt(3.0f) / 65536.0f;  // sum of 4 U(0, 65536): var 4·65536²/12
  auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t h = splitmix64(seed ^ static_cast<uint64_t>(i) * 0xD6E8FEB86659FD93ull);
      const int64_t sum = static_cast<int64_t>(h & 0xFFFF) + ((h >> 16) & 0xFFFF) + ((h >> 32) & 0xFFFF) + (h >> 48);
      out[i] = f32_to_bf16(static_cast<float>(sum - 2 * 65535) * unit_variance);
    }
  };
  std::vector<std::thread> threads;
  for (int64_t t = 1; t < n_threads; ++t)
    threads.emplace_back(fill, std::min(n, t * chunk), std::min(n, (t + 1) * chunk));
  fill(0, std::min(n, chunk));
  for (auto& t : threads) t.join();
}

}  // namespace

struct Checkpoint::Synthesizer {
  std::function<bool(const std::string&)> present;
  std::mt19937_64 rng;
  std::vector<std::pair<std::string, Buffer>> tensors;

  static bool ends_with(const std::string& s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  }

  Tensor make(const std::string& name, const Shape& shape) {
    for (const auto& [existing, buffer] : tensors)
      if (existing == name) return buffer.tensor();
    Buffer b = Buffer::allocate(DType::bf16, shape);
    uint16_t* out = b.tensor().data_as<uint16_t>();
    const int64_t n = shape.numel();
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const float fan_in = static_cast<float>(shape.rank >= 2 ? shape[-1] : 1);
    // The kind is decided once per tensor (name tests per element made a multi-GB checkpoint take
    // minutes); the values drawn, and their order, are as before.
    enum class Kind { a_log, dt_bias, one, bias, norm, conv, linear };
    const Kind kind = ends_with(name, "A_log")                                                   ? Kind::a_log
                      : ends_with(name, "dt_bias")                                               ? Kind::dt_bias
                      : ends_with(name, ".D")                                                    ? Kind::one
                      : ends_with(name, "e_score_correction_bias") || ends_with(name, ".bias")  ? Kind::bias
                      : name.find("norm") != std::string::npos                                   ? Kind::norm
                      : name.find("conv1d") != std::string::npos                                 ? Kind::conv
                                                                                                 : Kind::linear;
    const float conv_div = std::sqrt(static_cast<float>(shape[-1])), linear_div = std::sqrt(fan_in);
    if (kind == Kind::linear && n >= kParallelFillMin) {
      fill_normal_parallel(out, n, rng(), 1.0f / linear_div);
      tensors.emplace_back(name, std::move(b));
      return tensors.back().second.tensor();
    }
    for (int64_t i = 0; i < n; ++i) {
      float v;
      switch (kind) {
        case Kind::a_log: v = std::log(1.0f + 15.0f * unit(rng)); break;                    // decay rates in (1, 16)
        case Kind::dt_bias: v = std::log(std::expm1(0.001f + 0.1f * unit(rng))); break;     // softplus⁻¹ of dt
        case Kind::one: v = 1.0f; break;
        case Kind::bias: v = 0.02f * normal(rng); break;
        case Kind::norm: v = 1.0f + 0.1f * normal(rng); break;
        case Kind::conv: v = normal(rng) / conv_div; break;
        default: v = normal(rng) / linear_div; break;
      }
      out[i] = f32_to_bf16(v);
    }
    tensors.emplace_back(name, std::move(b));
    return tensors.back().second.tensor();
  }
};

Checkpoint Checkpoint::synthesize(std::function<bool(const std::string&)> present, uint64_t seed) {
  Checkpoint c;
  c.synthesizer_ = std::make_shared<Synthesizer>();
  c.synthesizer_->present = std::move(present);
  c.synthesizer_->rng.seed(seed);
  return c;
}

std::vector<std::pair<std::string, Tensor>> Checkpoint::synthesized() const {
  std::vector<std::pair<std::string, Tensor>> out;
  if (synthesizer_)
    for (const auto& [name, buffer] : synthesizer_->tensors) out.emplace_back(name, buffer.tensor());
  return out;
}

bool Checkpoint::contains(const std::string& name) const {
  if (synthesizer_) return synthesizer_->present(name);
  return index_.count(name) != 0;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, location] : index_) out.push_back(name);
  return out;
}

const TensorEntry* Checkpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second.entry;
}

std::string Checkpoint::file_of(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? std::string("(checkpoint)") : *it->second.file;
}

Status Checkpoint::add(const std::string& name, TensorEntry entry, const uint8_t* data, const std::string& file,
                       std::shared_ptr<const void> owner) {
  if (index_.count(name)) return error("{}: tensor '{}' also appears in {}", file, name, file_of(name));
  auto stored = std::make_shared<std::pair<TensorEntry, std::string>>(std::move(entry), file);
  index_[name] = Location{data, &stored->first, &stored->second};
  owners_.push_back(std::move(stored));
  owners_.push_back(std::move(owner));
  return ok_status();
}

Expected<Tensor> Checkpoint::get_any_shape(const std::string& name, std::initializer_list<DType> allowed) const {
  if (synthesizer_) return error("synthesized checkpoint: tensor '{}' requested without a shape", name);
  auto it = index_.find(name);
  if (it == index_.end()) {
    const std::string where = files_.size() == 1 ? files_[0]->path()
                              : !files_.empty()  ? fmt::format("{} files", files_.size())
                              : index_.empty()   ? std::string("(empty checkpoint)")
                                                 : *index_.begin()->second.file;
    return error("{}: missing tensor '{}'", where, name);
  }
  const auto& [data, entry, file] = it->second;
  if (std::find(allowed.begin(), allowed.end(), entry->dtype) == allowed.end()) {
    std::string names;
    for (DType t : allowed) names += fmt::format("{}{}", names.empty() ? "" : "/", dtype_name(t));
    return error("{}: tensor '{}' has {} {}, expected {}", *file, name, entry->ggml ? "ggml type" : "dtype",
                 entry->ggml ? ggml_type_name(*entry->ggml) : dtype_name(entry->dtype), names);
  }
  if (entry->shape.size() > static_cast<size_t>(kMaxRank))
    return error("{}: tensor '{}' has rank {}, more than {} is not supported", *file, name, entry->shape.size(),
                 kMaxRank);
  Shape shape;
  shape.rank = static_cast<int>(entry->shape.size());
  for (size_t i = 0; i < entry->shape.size(); ++i) shape.dims[i] = entry->shape[i];
  return Tensor(entry->dtype, shape, const_cast<uint8_t*>(data));
}

Expected<Tensor> Checkpoint::get(const std::string& name, const Shape& expected_shape,
                                 std::initializer_list<DType> allowed) const {
  if (synthesizer_) return synthesizer_->make(name, expected_shape);
  KAPITSA_TRY(Tensor t, get_any_shape(name, allowed));
  if (!(t.shape() == expected_shape))
    return error("{}: tensor '{}' has shape {}, expected {}", file_of(name), name, t.shape().str(), expected_shape.str());
  return t;
}

Expected<Buffer> Checkpoint::get_f32(const std::string& name, const Shape& expected_shape) const {
  KAPITSA_TRY(Tensor t, get(name, expected_shape, {DType::f32, DType::f16, DType::bf16, DType::f8_e4m3}));
  Buffer b = Buffer::allocate(DType::f32, expected_shape);
  convert_to_f32(t, b.f32());
  return b;
}

void convert_to_f32(const Tensor& src, float* dst) {
  const int64_t n = src.numel();
  const uint8_t* p = src.data_as<const uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    switch (src.dtype()) {
      case DType::f32: { float v; std::memcpy(&v, p + 4 * i, 4); dst[i] = v; break; }
      case DType::bf16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); dst[i] = bf16_to_f32(v); break; }
      case DType::f16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); dst[i] = f16_to_f32(v); break; }
      case DType::f8_e4m3: dst[i] = f8_e4m3_to_f32(p[i]); break;
      default: KAPITSA_CHECK(false, "convert_to_f32: {} is not a float dtype", dtype_name(src.dtype()));
    }
  }
}

}  // namespace kapitsa::weights
