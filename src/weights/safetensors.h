// Safetensors: read-only access to one .safetensors file (mmap, tensors used in place) and to a
// checkpoint folder (single file, sharded via model.safetensors.index.json, or model*.safetensors).
// Opening validates everything a malicious or truncated file could get wrong: header length, JSON,
// dtypes, shapes × dtype = bytes, offsets inside the file, no overlaps and no holes. Every error names
// the file and, where there is one, the tensor. Knows no model architecture.
#pragma once

#include "base/mapped_file.h"
#include "base/status.h"
#include "tensor/ggml_type.h"
#include "tensor/tensor.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kapitsa::weights {

struct TensorEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;  // any rank (vision towers have rank 5); Tensor views need rank <= 4
  size_t begin = 0;            // byte offset of the data from the start of the file
  size_t nbytes = 0;
  // Set for llama.cpp block data (from GGUF): dtype is then U8 and shape [.., rows, row bytes], and
  // ggml_cols is the logical number of values per row.
  std::optional<GgmlType> ggml;
  int64_t ggml_cols = 0;
};

class SafetensorsFile {
 public:
  static Expected<std::unique_ptr<SafetensorsFile>> open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::map<std::string, TensorEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Pointer to the first byte of a tensor's data (may be unaligned for files written by MLX).
  const uint8_t* data(const TensorEntry& entry) const { return file_.bytes().data() + entry.begin; }

 private:
  MappedFile file_;
  std::map<std::string, TensorEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint folder (or of one file), by name.
class Checkpoint {
 public:
  // `path` is a folder (model.safetensors.index.json, else every *.safetensors in it) or one file.
  static Expected<Checkpoint> open(const std::string& path);

  bool contains(const std::string& name) const;
  std::vector<std::string> names() const;
  const TensorEntry* find(const std::string& name) const;
  // The file a tensor lives in (for error messages).
  std::string file_of(const std::string& name) const;

  // A view of tensor `name`, checked against the expected shape (exact) and dtype set. Errors name the
  // file and tensor: missing, wrong shape, wrong dtype, rank > 4.
  Expected<Tensor> get(const std::string& name, const Shape& expected_shape,
                       std::initializer_list<DType> allowed = {DType::f32, DType::f16, DType::bf16}) const;
  // A checkpoint with no files that invents every tensor asked of it: seeded random bf16 values of the
  // requested shape (scaled by what the name suggests: 1/sqrt(fan-in) for matrices, ~1 for norms,
  // Mamba/DeltaNet decay parameters in their usual ranges), remembered so they can be written out.
  // `present(name)` answers contains() and so chooses among optional layouts (prefixes, fused experts).
  static Checkpoint synthesize(std::function<bool(const std::string&)> present, uint64_t seed);
  // The tensors a synthesized checkpoint handed out, in the order asked for.
  std::vector<std::pair<std::string, Tensor>> synthesized() const;

  // Adds tensor `name` (an error if it exists) whose bytes are at `data`, kept alive by `owner` (a mapped
  // file or an owned Buffer): how checkpoints in other formats (GGUF, models/gguf_checkpoint.h) are built.
  // `file` names where it came from in errors.
  Status add(const std::string& name, TensorEntry entry, const uint8_t* data, const std::string& file,
             std::shared_ptr<const void> owner);

  // Same without a shape check.
  Expected<Tensor> get_any_shape(const std::string& name,
                                 std::initializer_list<DType> allowed = {DType::f32, DType::f16, DType::bf16}) const;
  // A float tensor converted to an owned F32 buffer (for small parameter vectors: norms, biases, A_log).
  Expected<Buffer> get_f32(const std::string& name, const Shape& expected_shape) const;

 private:
  struct Location {
    const uint8_t* data;
    const TensorEntry* entry;
    const std::string* file;  // path, for errors
  };
  struct Synthesizer;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::shared_ptr<Synthesizer> synthesizer_;  // set only for synthesize()
  std::map<std::string, Location> index_;
  std::vector<std::shared_ptr<const void>> owners_;  // whatever add() was given (entries, files, buffers)
};

// Converts any float tensor (f32, f16, bf16, f8_e4m3) to f32, elementwise.  src, dst: same numel.
void convert_to_f32(const Tensor& src, float* dst);

}  // namespace kapitsa::weights
