// Prefix-cache entries on disk: scan, write (temporary file, fsync, rename), checked restore, LRU cap
// (see disk_cache.h).
#include "runtime/disk_cache.h"

#include "base/hash.h"
#include "base/log.h"
#include "models/state_bytes.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace kapitsa::runtime {

namespace fs = std::filesystem;

namespace {
constexpr char kMagic[8] = {'K', 'A', 'P', 'I', 'T', 'S', 'A', 'C'};
constexpr uint32_t kFormatVersion = 1;
constexpr const char* kExtension = ".kvc";
constexpr const char* kTemporary = ".tmp.";  // NAME.kvc.tmp.PID

uint32_t crc32_of(std::span<const std::byte> bytes) {
  return static_cast<uint32_t>(
      crc32_z(crc32_z(0, nullptr, 0), reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}
}  // namespace

struct DiskCache::Header {
  char magic[8] = {};
  uint32_t version = 0;
  uint32_t kv_dtype = 0;
  uint64_t fingerprint = 0;
  int64_t n_tokens = 0;
  int64_t kv_layers = 0, kv_heads = 0, head_dim = 0;
  int64_t recurrent_layers = 0, conv_numel = 0, ssm_numel = 0;
  uint64_t payload_bytes = 0;

  // Header + ids + payload + crc32.
  uint64_t file_bytes() const { return sizeof(Header) + 4 * static_cast<uint64_t>(n_tokens) + payload_bytes + 4; }
  bool same_model(const Header& o) const {  // what decides whether an entry's state fits this engine
    return fingerprint == o.fingerprint && kv_dtype == o.kv_dtype && kv_layers == o.kv_layers &&
           kv_heads == o.kv_heads && head_dim == o.head_dim && recurrent_layers == o.recurrent_layers &&
           conv_numel == o.conv_numel && ssm_numel == o.ssm_numel;
  }
};

Status DiskCache::prepare_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return error("cache directory {}: cannot create it: {}", dir, ec.message());
  if (!fs::is_directory(dir, ec)) return error("cache directory {}: not a directory", dir);
  if (access(dir.c_str(), W_OK | X_OK) != 0) return error("cache directory {}: not writable: {}", dir, std::strerror(errno));
  return ok_status();
}

DiskCache::DiskCache(DiskCacheOptions options, const models::Model& model, std::shared_ptr<models::KvPagePool> pool)
    : options_(std::move(options)), model_(model), pool_(std::move(pool)) {
  if (Status made = prepare_dir(options_.dir); !made.ok()) log::warn("{}", made.error().message);
  const std::unique_ptr<models::SequenceState> probe = model_.new_state(1, pool_);
  if (probe->slot_pool() != nullptr) recurrent_ = probe->slot_pool()->layout();
  scan();
}

DiskCache::Header DiskCache::our_header(int64_t n_tokens) const {
  static_assert(sizeof(Header) == 88, "the on-disk header is 88 bytes, no padding");
  Header h;
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kFormatVersion;
  const models::KvLayout& kv = pool_->layout();
  h.kv_dtype = static_cast<uint32_t>(kv.dtype);
  h.fingerprint = options_.fingerprint;
  h.n_tokens = n_tokens;
  h.kv_layers = kv.n_layers;
  h.kv_heads = kv.n_kv_heads;
  h.head_dim = kv.head_dim;
  h.recurrent_layers = recurrent_.n_layers;
  h.conv_numel = recurrent_.n_layers > 0 ? recurrent_.conv_window.numel() : 0;
  h.ssm_numel = recurrent_.n_layers > 0 ? recurrent_.ssm.numel() : 0;
  h.payload_bytes = models::state_byte_count(kv, recurrent_, n_tokens);
  return h;
}

std::string DiskCache::path_for(std::span<const int32_t> ids) const {
  const uint64_t h = fnv1a_values(ids, options_.fingerprint ^ kFnvOffset);
  return (fs::path(options_.dir) / fmt::format("{:016x}{}", h, kExtension)).string();
}

void DiskCache::scan() {
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, std::string>> by_time;
  for (const fs::directory_entry& item : fs::directory_iterator(options_.dir, ec)) {
    const std::string name = item.path().filename().string();
    const std::string path = item.path().string();
    if (const size_t t = name.find(std::string(kExtension) + kTemporary); t != std::string::npos) {
      // A write that never finished. Its writer may still be running (another server on this folder).
      const long pid = std::strtol(name.c_str() + t + std::strlen(kExtension) + std::strlen(kTemporary), nullptr, 10);
      if (pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;
      log::warn("cache directory: removing {}, left by an interrupted write", path);
      fs::remove(item.path(), ec);
      continue;
    }
    if (item.path().extension() != kExtension || !item.is_regular_file(ec)) continue;
    const uintmax_t size = item.file_size(ec);
    Header h;
    std::ifstream in(item.path(), std::ios::binary);
    const bool read = static_cast<bool>(in.read(reinterpret_cast<char*>(&h), sizeof h));
    if (!read || std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) {
      log::warn("cache directory: removing {}: not a Kapitsa cache entry (torn or corrupt)", path);
      fs::remove(item.path(), ec);
      continue;
    }
    Entry e;
    e.path = path;
    e.bytes = static_cast<size_t>(size);
    if (h.version != kFormatVersion) {
      log::warn("cache directory: skipping {}: format version {}, this build reads {}", path, h.version, kFormatVersion);
    } else if (h.n_tokens <= 0 || h.n_tokens > (int64_t{1} << 30) || h.file_bytes() != size) {
      log::warn("cache directory: removing {}: {} bytes where its header says {} (torn or corrupt)", path, size,
                h.file_bytes());
      fs::remove(item.path(), ec);
      continue;
    } else if (!our_header(h.n_tokens).same_model(h) || h.payload_bytes != our_header(h.n_tokens).payload_bytes) {
      log::warn("cache directory: skipping {}: written for another model (or KV dtype)", path);
    } else {
      e.tokens.resize(static_cast<size_t>(h.n_tokens));
      if (!in.read(reinterpret_cast<char*>(e.tokens.data()), static_cast<std::streamsize>(4 * e.tokens.size()))) {
        log::warn("cache directory: removing {}: unreadable", path);
        fs::remove(item.path(), ec);
        continue;
      }
      e.ours = true;
    }
    by_time.emplace_back(item.last_write_time(ec), name);
    bytes_ += e.bytes;
    entries_.emplace(name, std::move(e));
  }
  if (ec) log::warn("cache directory {}: {}", options_.dir, ec.message());
  std::sort(by_time.begin(), by_time.end());
  for (const auto& [time, name] : by_time) entries_.at(name).last_used = ++clock_;
  evict_to(options_.max_bytes, "");
  log::info("cache directory {}: {} entries of this model, {:.1f} MiB in all", options_.dir, entries(),
            static_cast<double>(bytes_) / (1 << 20));
}

size_t DiskCache::entries() const {
  return static_cast<size_t>(std::count_if(entries_.begin(), entries_.end(), [](const auto& e) { return e.second.ours; }));
}

void DiskCache::touch(Entry& entry) {
  entry.last_used = ++clock_;
  std::error_code ec;  // recency for the next start; a failure only costs LRU order
  fs::last_write_time(entry.path, fs::file_time_type::clock::now(), ec);
}

void DiskCache::remove(const std::string& name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) return;
  std::error_code ec;
  fs::remove(it->second.path, ec);
  bytes_ -= it->second.bytes;
  entries_.erase(it);
}

void DiskCache::evict_to(size_t max_bytes, const std::string& keep) {
  while (bytes_ > max_bytes) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->first != keep && (oldest == entries_.end() || it->second.last_used < oldest->second.last_used)) oldest = it;
    if (oldest == entries_.end()) return;
    log::debug("cache directory: evicting {} ({} bytes)", oldest->second.path, oldest->second.bytes);
    remove(oldest->first);
  }
}

bool DiskCache::write_file(const std::string& path, const std::vector<std::byte>& bytes) {
  const std::string tmp = fmt::format("{}{}{}", path, kTemporary, getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const bool ok = done == bytes.size() && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  // The rename itself must reach the disk before the entry counts as written.
  if (const int dir = ::open(options_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return true;
}

void DiskCache::save(std::span<const int32_t> ids, const models::SequenceState& state) {
  KAPITSA_CHECK(state.n_past() == static_cast<int64_t>(ids.size()), "disk cache: a state of {} tokens filed under {}",
                state.n_past(), ids.size());
  if (ids.empty()) return;
  const std::string path = path_for(ids);
  const std::string name = fs::path(path).filename().string();
  if (auto it = entries_.find(name); it != entries_.end() && it->second.ours &&
                                      std::equal(ids.begin(), ids.end(), it->second.tokens.begin(), it->second.tokens.end())) {
    touch(it->second);
    return;
  }
  const Header h = our_header(static_cast<int64_t>(ids.size()));
  if (h.file_bytes() > options_.max_bytes) return;  // would evict everything and then itself
  std::vector<std::byte> bytes(sizeof h + ids.size_bytes());
  bytes.reserve(h.file_bytes());
  std::memcpy(bytes.data(), &h, sizeof h);
  std::memcpy(bytes.data() + sizeof h, ids.data(), ids.size_bytes());
  models::state_to_bytes(state, bytes);
  const uint32_t crc = crc32_of(bytes);
  bytes.resize(bytes.size() + sizeof crc);
  std::memcpy(bytes.data() + bytes.size() - sizeof crc, &crc, sizeof crc);
  KAPITSA_CHECK(bytes.size() == h.file_bytes(), "disk cache entry: {} bytes, expected {}", bytes.size(), h.file_bytes());

  remove(name);  // an entry of a hash collision or another model: replaced
  if (!write_file(path, bytes)) {
    if (!warned_write_) log::warn("cache directory: cannot write {}: {} (later failures are not reported)", path, std::strerror(errno));
    warned_write_ = true;
    return;
  }
  Entry e;
  e.path = path;
  e.bytes = bytes.size();
  e.last_used = ++clock_;
  e.ours = true;
  e.tokens.assign(ids.begin(), ids.end());
  bytes_ += e.bytes;
  entries_[name] = std::move(e);
  evict_to(options_.max_bytes, name);
}

Expected<std::unique_ptr<models::SequenceState>> DiskCache::restore(const Entry& entry, int64_t capacity) const {
  std::ifstream in(entry.path, std::ios::binary);
  if (!in) return error("cannot open it");
  std::vector<std::byte> bytes(entry.bytes + 1);  // one more: a file that grew since the scan shows
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  const auto got = static_cast<size_t>(in.gcount());
  if (got != entry.bytes) return error("{} bytes where {} were written (torn)", got, entry.bytes);
  bytes.resize(got);
  Header h;
  std::memcpy(&h, bytes.data(), sizeof h);
  const Header ours = our_header(static_cast<int64_t>(entry.tokens.size()));
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != kFormatVersion || !ours.same_model(h) ||
      h.n_tokens != ours.n_tokens || h.payload_bytes != ours.payload_bytes)
    return error("its header changed since the scan");
  uint32_t crc = 0;
  std::memcpy(&crc, bytes.data() + got - sizeof crc, sizeof crc);
  const std::span<const std::byte> body(bytes.data(), got - sizeof crc);
  if (crc32_of(body) != crc) return error("checksum mismatch (corrupt)");
  if (std::memcmp(body.data() + sizeof h, entry.tokens.data(), 4 * entry.tokens.size()) != 0)
    return error("its token ids changed since the scan");
  return models::state_from_bytes(model_, pool_, h.n_tokens, std::max(capacity, h.n_tokens),
                                  body.subspan(sizeof h + 4 * entry.tokens.size()));
}

DiskCache::Loaded DiskCache::load_deepest(std::span<const int32_t> ids, int64_t max_tokens, int64_t deeper_than,
                                          int64_t capacity) {
  for (;;) {
    // Linear in entries × prefix length: entries are few (each holds a whole state), and the compare
    // stops at the first differing id.
    Entry* best = nullptr;
    std::string best_name;
    for (auto& [name, e] : entries_) {
      const auto n = static_cast<int64_t>(e.tokens.size());
      if (!e.ours || n <= deeper_than || n > max_tokens || n > static_cast<int64_t>(ids.size())) continue;
      if (best != nullptr && n <= static_cast<int64_t>(best->tokens.size())) continue;
      if (std::equal(e.tokens.begin(), e.tokens.end(), ids.begin())) {
        best = &e;
        best_name = name;
      }
    }
    if (best == nullptr) return {};
    if (pool_->free_pages() < pool_->pages_for(static_cast<int64_t>(best->tokens.size()))) return {};  // no room now
    auto state = restore(*best, capacity);
    if (state.ok()) {
      touch(*best);
      return {std::move(state).value(), static_cast<int64_t>(best->tokens.size())};
    }
    log::warn("cache directory: removing {}: {}", best->path, state.error().message);
    remove(best_name);
  }
}

}  // namespace kapitsa::runtime
