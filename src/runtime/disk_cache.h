// DiskCache: prefix-cache snapshots on disk, so that a restarted engine resumes a conversation without
// prefilling it again. One file per snapshot, named by a hash of the model and the token ids it follows:
//   header (88 bytes: magic "KAPITSAC", format version, KV dtype, model fingerprint, token count, the
//   KV and recurrent layouts, payload size) · token ids (int32) · payload (models/state_bytes.h) ·
//   crc32 (zlib) of everything before it.  Little-endian, as every platform Kapitsa builds for.
// Writes go to NAME.tmp.PID in the same folder, are fsynced, then renamed over NAME and the folder
// fsynced: a writer killed at any point leaves a temporary file (removed at the next start once its
// process is gone), never a partial entry. An entry is used only when its magic, version, size, model
// fingerprint, layouts, token ids and checksum all agree; a torn or corrupt one is removed with a
// warning naming the file; another model's (or another format version's) is left alone with a warning.
// The folder is capped at max_bytes: least recently used entries go first, whatever model wrote them
// (recency survives restarts as file modification times). Writes are synchronous (engine thread).
// Not thread-safe: the engine thread owns it (the constructor runs before that thread starts).
#pragma once

#include "models/kv_pages.h"
#include "models/model.h"
#include "models/state_slots.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kapitsa::runtime {

struct DiskCacheOptions {
  std::string dir;           // "" → no disk cache
  size_t max_bytes = size_t{10} << 30;  // every entry in dir, whatever model wrote it
  uint64_t fingerprint = 0;  // models::model_fingerprint of the engine's model
};

class DiskCache {
 public:
  // Creates `dir` when missing; an error naming it when it cannot be created or written.
  static Status prepare_dir(const std::string& dir);

  // Scans options.dir (see the file comment for what is removed and what is skipped). States are
  // restored into `pool` for `model`.
  DiskCache(DiskCacheOptions options, const models::Model& model, std::shared_ptr<models::KvPagePool> pool);

  // Writes the state after exactly `ids` (state.n_past() == ids.size()) unless an entry for them is
  // there already (then it is only marked used); evicts to stay within max_bytes. Failures (disk
  // full, permissions) are warnings: the cache is only a speed-up.
  void save(std::span<const int32_t> ids, const models::SequenceState& state);

  struct Loaded {
    std::unique_ptr<models::SequenceState> state;  // null: nothing usable
    int64_t tokens = 0;
  };
  // The deepest entry after a prefix of `ids` longer than `deeper_than` and at most `max_tokens`
  // tokens, restored with room for max(capacity, its tokens) tokens; marks it used. An entry that
  // fails its checks is removed (warning) and the next deepest tried; a full KV pool gives nothing.
  Loaded load_deepest(std::span<const int32_t> ids, int64_t max_tokens, int64_t deeper_than, int64_t capacity);

  size_t bytes() const { return bytes_; }  // every entry in the folder
  size_t entries() const;                  // this model's
  const std::string& dir() const { return options_.dir; }

 private:
  struct Entry {
    std::string path;
    size_t bytes = 0;
    uint64_t last_used = 0;
    bool ours = false;            // this model's, same format and layouts
    std::vector<int32_t> tokens;  // ours only
  };
  struct Header;
  void scan();
  Header our_header(int64_t n_tokens) const;
  std::string path_for(std::span<const int32_t> ids) const;
  bool write_file(const std::string& path, const std::vector<std::byte>& bytes);
  Expected<std::unique_ptr<models::SequenceState>> restore(const Entry& entry, int64_t capacity) const;
  void touch(Entry& entry);
  void remove(const std::string& name);
  void evict_to(size_t max_bytes, const std::string& keep);

  DiskCacheOptions options_;
  const models::Model& model_;
  std::shared_ptr<models::KvPagePool> pool_;
  models::RecurrentLayout recurrent_;
  std::map<std::string, Entry> entries_;  // by file name
  size_t bytes_ = 0;
  uint64_t clock_ = 0;
  bool warned_write_ = false;
};

}  // namespace kapitsa::runtime
