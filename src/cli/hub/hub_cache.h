// The Hugging Face Hub cache on disk, shared with huggingface_hub and the `hf` CLI:
//   <cache>/models--org--name/blobs/<etag>               the file contents, named by sha256 (LFS) or git blob id
//   <cache>/models--org--name/blobs/<etag>.incomplete    a download in progress (resumed from its length)
//   <cache>/models--org--name/snapshots/<commit>/<path>  relative symlinks into blobs/
//   <cache>/models--org--name/refs/<revision>            the commit the revision pointed to
//   <cache>/.locks/models--org--name/<etag>.lock         held while a blob downloads
// where <cache> is catalog::hub_cache_dir() ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub).
#pragma once

#include "base/status.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace kapitsa::cli::hub {

struct RepoCache {
  std::filesystem::path cache;  // the hub cache folder
  std::string repo;             // "org/name"
  std::filesystem::path root() const;  // models--org--name
  std::filesystem::path blob(const std::string& etag) const;
  std::filesystem::path incomplete(const std::string& etag) const;
  std::filesystem::path lock(const std::string& etag) const;
  std::filesystem::path snapshot(const std::string& commit) const;
  std::filesystem::path ref(const std::string& revision) const;
};

RepoCache repo_cache(const std::string& repo);

// snapshots/<commit>/<path> -> ../../blobs/<etag> (one more ../ per folder in path); replaces what is there.
Status link_snapshot_file(const RepoCache& c, const std::string& commit, const std::string& path, const std::string& etag);

// refs/<revision> = commit, written to a temporary file and renamed (a reader never sees half of it).
Status write_ref(const RepoCache& c, const std::string& revision, const std::string& commit);

// One model repository in the cache, for `kapitsa ls`.
struct CachedRepo {
  std::string repo;
  std::filesystem::path root;
  std::string main_commit;        // refs/main, empty when absent
  int64_t blob_bytes = 0;         // complete blobs
  int64_t incomplete_bytes = 0;   // .incomplete files (an interrupted pull)
  int files = 0;                  // files in the refs/main snapshot
};

std::vector<CachedRepo> list_cached(const std::filesystem::path& cache);

// An exclusive advisory lock on a file (flock, the kind huggingface_hub's filelock takes), released by
// the destructor. Waits for another process holding it.
class FileLock {
 public:
  static Expected<FileLock> acquire(const std::filesystem::path& path);
  FileLock(FileLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FileLock(const FileLock&) = delete;
  ~FileLock();

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace kapitsa::cli::hub
