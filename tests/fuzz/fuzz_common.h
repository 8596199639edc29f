// Helpers shared by the libFuzzer targets (tests/fuzz/fuzz_*.cpp): where the test data lives, reading
// a file once, and handing an input to code that only opens paths (an in-memory file, no disk).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace kapitsa::fuzz {

inline std::string data_path(const std::string& rel) { return std::string(KAPITSA_TEST_DATA) + "/" + rel; }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A file in memory holding `bytes`, named by a /proc/self/fd path (mmap-able like a real file).
class MemoryFile {
 public:
  explicit MemoryFile(std::string_view bytes) : fd_(memfd_create("fuzz", 0)) {
    if (fd_ < 0 || write(fd_, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) std::abort();
  }
  ~MemoryFile() { close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

// Keeps the optimizer from dropping reads whose only purpose is to touch memory.
inline void keep(uint64_t value) { asm volatile("" : : "r"(value) : "memory"); }

}  // namespace kapitsa::fuzz
