// GGUF reading and validation (see gguf.h). Layout (little-endian): "GGUF", u32 version, u64 tensor
// count, u64 key/value count; key/value pairs (string key, u32 type, value); tensor infos (string name,
// u32 n_dims, u64 ne[n_dims] innermost first, u32 type, u64 offset); padding to general.alignment; the
// data section, each tensor at data start + offset. Strings are u64 length + bytes (no NUL).
#include "weights/gguf.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <regex>
#include <span>

namespace kapitsa::weights {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS
constexpr uint64_t kMaxStringBytes = 1u << 30;

std::string_view value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8: return "u8";
    case GgufValueType::i8: return "i8";
    case GgufValueType::u16: return "u16";
    case GgufValueType::i16: return "i16";
    case GgufValueType::u32: return "u32";
    case GgufValueType::i32: return "i32";
    case GgufValueType::f32: return "f32";
    case GgufValueType::boolean: return "bool";
    case GgufValueType::string: return "string";
    case GgufValueType::array: return "array";
    case GgufValueType::u64: return "u64";
    case GgufValueType::i64: return "i64";
    case GgufValueType::f64: return "f64";
  }
  return "unknown";
}

// Bytes of a scalar of type t (0 for string / array / unknown).
uint64_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8: case GgufValueType::i8: case GgufValueType::boolean: return 1;
    case GgufValueType::u16: case GgufValueType::i16: return 2;
    case GgufValueType::u32: case GgufValueType::i32: case GgufValueType::f32: return 4;
    case GgufValueType::u64: case GgufValueType::i64: case GgufValueType::f64: return 8;
    default: return 0;
  }
}

bool known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::f64); }

// A cursor over the header bytes: every read is bounds-checked and says what it was reading.
class Reader {
 public:
  Reader(const std::string& path, std::span<const uint8_t> bytes) : path_(path), bytes_(bytes) {}
  size_t pos() const { return pos_; }
  uint64_t left() const { return bytes_.size() - pos_; }

  template <class T>
  Expected<T> read(const std::string& what) {
    if (left() < sizeof(T))
      return error("{}: truncated at byte {} reading {} ({} bytes left)", path_, pos_, what, left());
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  Expected<std::string> string(const std::string& what) {
    KAPITSA_TRY(const uint64_t n, read<uint64_t>(what + " length"));
    if (n > left() || n > kMaxStringBytes)
      return error("{}: {} at byte {} claims {} bytes, but only {} are left in the file", path_, what, pos_ - 8, n,
                   left());
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }

  // One scalar of type t into v (integers and bools in v.i, floats in v.f).
  Status scalar(GgufValueType t, GgufValue& v, const std::string& what) {
    switch (t) {
      case GgufValueType::u8: { KAPITSA_TRY(auto x, read<uint8_t>(what)); v.i = x; break; }
      case GgufValueType::i8: { KAPITSA_TRY(auto x, read<int8_t>(what)); v.i = x; break; }
      case GgufValueType::boolean: { KAPITSA_TRY(auto x, read<uint8_t>(what)); v.i = x != 0; break; }
      case GgufValueType::u16: { KAPITSA_TRY(auto x, read<uint16_t>(what)); v.i = x; break; }
      case GgufValueType::i16: { KAPITSA_TRY(auto x, read<int16_t>(what)); v.i = x; break; }
      case GgufValueType::u32: { KAPITSA_TRY(auto x, read<uint32_t>(what)); v.i = x; break; }
      case GgufValueType::i32: { KAPITSA_TRY(auto x, read<int32_t>(what)); v.i = x; break; }
      case GgufValueType::i64: { KAPITSA_TRY(auto x, read<int64_t>(what)); v.i = x; break; }
      case GgufValueType::u64: {
        KAPITSA_TRY(auto x, read<uint64_t>(what));
        if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          return error("{}: {} is the u64 {}, beyond the int64 range Kapitsa reads", path_, what, x);
        v.i = static_cast<int64_t>(x);
        break;
      }
      case GgufValueType::f32: { KAPITSA_TRY(auto x, read<float>(what)); v.f = x; break; }
      case GgufValueType::f64: { KAPITSA_TRY(auto x, read<double>(what)); v.f = x; break; }
      case GgufValueType::string: { KAPITSA_TRY(v.s, string(what)); break; }
      default: return error("{}: {} has value type {}", path_, what, value_type_name(t));
    }
    return ok_status();
  }

  Status value(GgufValueType t, GgufValue& v, const std::string& what, int depth = 0) {
    v.type = t;
    if (t != GgufValueType::array) return scalar(t, v, what);
    KAPITSA_TRY(const uint32_t element, read<uint32_t>(what + " element type"));
    if (!known_value_type(element)) return error("{}: {} is an array of unknown value type {}", path_, what, element);
    KAPITSA_TRY(const uint64_t n, read<uint64_t>(what + " array length"));
    v.element = static_cast<GgufValueType>(element);
    v.count = n;
    // Each element takes at least its scalar size (a string at least its 8-byte length, an array 12):
    // a count the remaining bytes cannot hold is rejected before anything is allocated.
    const uint64_t least = v.element == GgufValueType::string ? 8 : v.element == GgufValueType::array ? 12 : scalar_size(v.element);
    if (n > left() / least)
      return error("{}: {} claims {} elements of {}, more than the {} bytes left in the file can hold", path_, what, n,
                   value_type_name(v.element), left());
    if (v.element == GgufValueType::array) {
      if (depth > 2) return error("{}: {} nests arrays more than 3 deep", path_, what);
      for (uint64_t k = 0; k < n; ++k) {
        GgufValue inner;
        KAPITSA_RETURN_IF_ERROR(value(GgufValueType::array, inner, what, depth + 1));
      }
      return ok_status();
    }
    if (v.element == GgufValueType::string) v.strings.reserve(n);
    else if (v.element == GgufValueType::f32 || v.element == GgufValueType::f64) v.floats.reserve(n);
    else v.ints.reserve(n);
    GgufValue item;
    for (uint64_t k = 0; k < n; ++k) {
      KAPITSA_RETURN_IF_ERROR(scalar(v.element, item, what));
      if (v.element == GgufValueType::string) v.strings.push_back(std::move(item.s));
      else if (v.element == GgufValueType::f32 || v.element == GgufValueType::f64) v.floats.push_back(item.f);
      else v.ints.push_back(item.i);
    }
    return ok_status();
  }

 private:
  const std::string& path_;
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

std::string dims_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + "]";
}

}  // namespace

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::u8: case GgufValueType::i8: case GgufValueType::u16: case GgufValueType::i16:
    case GgufValueType::u32: case GgufValueType::i32: case GgufValueType::u64: case GgufValueType::i64:
      return true;
    default: return false;
  }
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Expected<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  auto result = std::make_unique<GgufFile>();
  KAPITSA_TRY(result->file_, MappedFile::open(path));
  const auto bytes = result->file_.bytes();
  Reader r(path, bytes);
  KAPITSA_TRY(const uint32_t magic, r.read<uint32_t>("the magic"));
  if (magic != kMagic) return error("{}: not a GGUF file (the first 4 bytes are not \"GGUF\")", path);
  KAPITSA_TRY(result->version_, r.read<uint32_t>("the version"));
  if (result->version_ != 2 && result->version_ != 3)
    return error("{}: GGUF version {} (Kapitsa reads versions 2 and 3)", path, result->version_);
  KAPITSA_TRY(const uint64_t n_tensors, r.read<uint64_t>("the tensor count"));
  KAPITSA_TRY(const uint64_t n_kv, r.read<uint64_t>("the metadata count"));
  // A key/value pair takes at least 8 + 4 + 1 bytes, a tensor info 8 + 4 + 4 + 8.
  if (n_kv > r.left() / 13) return error("{}: header claims {} metadata entries, more than the file can hold", path, n_kv);
  if (n_tensors > r.left() / 24) return error("{}: header claims {} tensors, more than the file can hold", path, n_tensors);

  for (uint64_t k = 0; k < n_kv; ++k) {
    KAPITSA_TRY(std::string key, r.string(fmt::format("metadata key {}", k)));
    KAPITSA_TRY(const uint32_t type, r.read<uint32_t>(fmt::format("the type of metadata '{}'", key)));
    if (!known_value_type(type)) return error("{}: metadata '{}' has unknown value type {}", path, key, type);
    GgufValue v;
    KAPITSA_RETURN_IF_ERROR(r.value(static_cast<GgufValueType>(type), v, fmt::format("metadata '{}'", key)));
    if (!result->metadata_.emplace(key, std::move(v)).second)
      return error("{}: metadata key '{}' appears twice", path, key);
  }
  if (const GgufValue* a = result->find("general.alignment")) {
    if (!a->is_integer() || a->i <= 0 || (a->i & (a->i - 1)) != 0)
      return error("{}: metadata 'general.alignment' must be a positive power of two, got {}", path,
                   a->is_integer() ? fmt::format("{}", a->i) : "a non-integer");
    result->alignment_ = static_cast<uint64_t>(a->i);
  }

  struct Info {
    GgufTensor tensor;
    uint64_t offset;
  };
  std::vector<Info> infos;
  infos.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    Info info;
    GgufTensor& t = info.tensor;
    KAPITSA_TRY(t.name, r.string(fmt::format("the name of tensor {}", k)));
    KAPITSA_TRY(const uint32_t n_dims, r.read<uint32_t>(fmt::format("the rank of tensor '{}'", t.name)));
    if (n_dims == 0 || n_dims > kMaxDims)
      return error("{}: tensor '{}' has {} dimensions (1 to {})", path, t.name, n_dims, kMaxDims);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      KAPITSA_TRY(const uint64_t ne, r.read<uint64_t>(fmt::format("the dims of tensor '{}'", t.name)));
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || (ne != 0 && numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ne))
        return error("{}: tensor '{}': dimension {} = {} makes the element count overflow", path, t.name, d, ne);
      numel *= ne;
      t.shape.insert(t.shape.begin(), static_cast<int64_t>(ne));  // ggml's ne[0] is the innermost
    }
    KAPITSA_TRY(const uint32_t type, r.read<uint32_t>(fmt::format("the type of tensor '{}'", t.name)));
    const auto ti = ggml_type_info(type);
    if (!ti || ggml_type_internal(static_cast<GgmlType>(type)))
      return error("{}: tensor '{}' has unknown ggml type {}", path, t.name, type);
    t.type = static_cast<GgmlType>(type);
    if (t.shape.back() % ti->block_size != 0)
      return error("{}: tensor '{}' {} of type {}: rows of {} values are not whole blocks of {}", path, t.name,
                   dims_string(t.shape), ti->name, t.shape.back(), ti->block_size);
    const uint64_t blocks = numel / static_cast<uint64_t>(ti->block_size);
    if (blocks > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(ti->block_bytes))
      return error("{}: tensor '{}' {}: byte size overflows", path, t.name, dims_string(t.shape));
    t.nbytes = blocks * static_cast<uint64_t>(ti->block_bytes);
    KAPITSA_TRY(info.offset, r.read<uint64_t>(fmt::format("the offset of tensor '{}'", t.name)));
    if (info.offset % result->alignment_ != 0)
      return error("{}: tensor '{}' at data offset {} is not aligned to {} bytes", path, t.name, info.offset,
                   result->alignment_);
    infos.push_back(std::move(info));
  }

  const uint64_t data_start = (r.pos() + result->alignment_ - 1) / result->alignment_ * result->alignment_;
  if (data_start > bytes.size() && !infos.empty())
    return error("{}: truncated: the data section would start at byte {} of a {}-byte file", path, data_start,
                 bytes.size());
  const uint64_t data_size = data_start <= bytes.size() ? bytes.size() - data_start : 0;
  for (Info& info : infos) {
    GgufTensor& t = info.tensor;
    if (info.offset > data_size || t.nbytes > data_size - info.offset)
      return error("{}: tensor '{}' ({} bytes at data offset {}) reaches beyond the end of the file (data section is "
                   "{} bytes)",
                   path, t.name, t.nbytes, info.offset, data_size);
    t.begin = data_start + info.offset;
    const std::string name = t.name;
    if (!result->tensors_.emplace(name, std::move(t)).second) return error("{}: tensor '{}' appears twice", path, name);
  }
  // No two tensors may share bytes (a crafted file could alias a weight with another).
  std::vector<const GgufTensor*> by_offset;
  for (const auto& [name, t] : result->tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->begin + by_offset[i - 1]->nbytes > by_offset[i]->begin && by_offset[i]->nbytes > 0)
      return error("{}: tensors '{}' and '{}' overlap", path, by_offset[i - 1]->name, by_offset[i]->name);
  return result;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

Expected<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return error("{}: metadata '{}' is missing", path(), key);
  if (!v->is_integer()) return error("{}: metadata '{}' is {}, expected an integer", path(), key, value_type_name(v->type));
  return v->i;
}

Expected<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return error("{}: metadata '{}' is missing", path(), key);
  if (v->is_integer()) return static_cast<double>(v->i);
  if (!v->is_float()) return error("{}: metadata '{}' is {}, expected a number", path(), key, value_type_name(v->type));
  return v->f;
}

Expected<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return error("{}: metadata '{}' is missing", path(), key);
  if (v->type != GgufValueType::string)
    return error("{}: metadata '{}' is {}, expected a string", path(), key, value_type_name(v->type));
  return v->s;
}

Expected<std::vector<std::shared_ptr<GgufFile>>> open_gguf_parts(const std::string& path) {
  namespace fs = std::filesystem;
  static const std::regex split(R"((.*)-(\d{5})-of-(\d{5})\.gguf)");
  std::smatch m;
  const std::string file = fs::path(path).filename().string();
  std::vector<std::string> paths;
  if (std::regex_match(file, m, split)) {
    const int n = std::stoi(m[3].str());
    if (n < 1 || std::stoi(m[2].str()) < 1 || std::stoi(m[2].str()) > n)
      return error("{}: split file name says part {} of {}", path, m[2].str(), m[3].str());
    for (int k = 1; k <= n; ++k) {
      const fs::path part = fs::path(path).parent_path() / fmt::format("{}-{:05}-of-{:05}.gguf", m[1].str(), k, n);
      if (!fs::exists(part)) return error("{}: part {} of {} of this split model is missing ({})", path, k, n, part.string());
      paths.push_back(part.string());
    }
  } else {
    paths.push_back(path);
  }
  std::vector<std::shared_ptr<GgufFile>> parts;
  std::map<std::string, std::string> where;
  for (const std::string& p : paths) {
    KAPITSA_TRY(std::unique_ptr<GgufFile> f, GgufFile::open(p));
    for (const auto& [name, t] : f->tensors())
      if (!where.emplace(name, p).second) return error("{}: tensor '{}' is also in {}", p, name, where[name]);
    parts.push_back(std::move(f));
  }
  if (paths.size() > 1) {
    const GgufValue* count = parts[0]->find("split.count");
    if (count != nullptr && count->is_integer() && count->i != static_cast<int64_t>(paths.size()))
      return error("{}: metadata 'split.count' is {} but the file name says {} parts", paths[0], count->i, paths.size());
  }
  return parts;
}

}  // namespace kapitsa::weights
