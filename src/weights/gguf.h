// GgufFile: read-only access to a GGUF file (llama.cpp's model format, versions 2 and 3), mmapped,
// tensors used in place. Opening validates what a truncated or malicious file could get wrong: magic
// and version, every count and string length against the bytes left (no allocation from a count the
// file cannot back), key and tensor names unique, dims (at most 4, product without overflow, the row
// a whole number of blocks), a known tensor type, general.alignment a power of two, each tensor's
// offset aligned and its data inside the file, no two tensors overlapping. Every error names the file
// and, where there is one, the key or tensor. Knows no model architecture.
// Split models (NAME-00001-of-00003.gguf): open_split() opens every part named like the given one.
#pragma once

#include "base/mapped_file.h"
#include "base/status.h"
#include "tensor/ggml_type.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kapitsa::weights {

// GGUF metadata value types (gguf_type), as stored.
enum class GgufValueType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9,
  u64 = 10, i64 = 11, f64 = 12,
};

// One metadata value. Scalars: integers in `i` (u64 above INT64_MAX is an error at read time), floats in
// `f`, bools in `i` (0/1), strings in `s`. Arrays: `element` says the type; string arrays fill
// `strings`, integer and bool arrays `ints`, float arrays `floats` (arrays of arrays are skipped).
struct GgufValue {
  GgufValueType type = GgufValueType::u8;
  GgufValueType element = GgufValueType::u8;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<std::string> strings;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  uint64_t count = 0;  // array length

  bool is_integer() const;
  bool is_float() const { return type == GgufValueType::f32 || type == GgufValueType::f64; }
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::f32;
  std::vector<int64_t> shape;  // row-major, outermost first (ggml's ne reversed): [.., rows, K]
  size_t begin = 0;            // byte offset of the data from the start of the file
  size_t nbytes = 0;
  int64_t numel() const;
};

class GgufFile {
 public:
  static Expected<std::unique_ptr<GgufFile>> open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::map<std::string, GgufTensor>& tensors() const { return tensors_; }
  const GgufValue* find(const std::string& key) const;
  const uint8_t* data(const GgufTensor& t) const { return file_.bytes().data() + t.begin; }

  // Typed metadata; errors name the file and key (missing, wrong type).
  Expected<int64_t> get_int(const std::string& key) const;
  Expected<double> get_float(const std::string& key) const;  // an integer is accepted too
  Expected<std::string> get_string(const std::string& key) const;

 private:
  MappedFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::map<std::string, GgufTensor> tensors_;
};

// `path` and, when it is named NAME-0000k-of-0000n.gguf, every other part NAME-0000i-of-0000n.gguf next
// to it (all must exist; a tensor name in two parts is an error). The first returned is part 1, whose
// metadata holds the model's keys.
Expected<std::vector<std::shared_ptr<GgufFile>>> open_gguf_parts(const std::string& path);

}  // namespace kapitsa::weights
