// MappedFile: a read-only memory map of a whole file (weights are used in place, never copied).
// Move-only; unmaps on destruction. An empty file maps to an empty span.
#pragma once

#include "base/status.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace kapitsa {

class MappedFile {
 public:
  static Expected<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace kapitsa
