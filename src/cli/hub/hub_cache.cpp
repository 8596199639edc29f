// The Hub cache layout, symlinks, refs, locks and the listing behind hub_cache.h.
#include "cli/hub/hub_cache.h"

#include "cli/catalog/catalog.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace kapitsa::cli::hub {
namespace fs = std::filesystem;

namespace {

// "models--org--name" -> "org/name" (a name may itself hold "-", never "--" at the org boundary).
std::string repo_from_folder(const std::string& folder) {
  std::string rest = folder.substr(std::string("models--").size());
  const size_t sep = rest.find("--");
  return sep == std::string::npos ? rest : rest.substr(0, sep) + "/" + rest.substr(sep + 2);
}

}  // namespace

fs::path RepoCache::root() const { return cache / catalog::cache_folder_name(repo); }
fs::path RepoCache::blob(const std::string& etag) const { return root() / "blobs" / etag; }
fs::path RepoCache::incomplete(const std::string& etag) const { return root() / "blobs" / (etag + ".incomplete"); }
fs::path RepoCache::lock(const std::string& etag) const { return cache / ".locks" / catalog::cache_folder_name(repo) / (etag + ".lock"); }
fs::path RepoCache::snapshot(const std::string& commit) const { return root() / "snapshots" / commit; }
fs::path RepoCache::ref(const std::string& revision) const { return root() / "refs" / revision; }

RepoCache repo_cache(const std::string& repo) { return RepoCache{catalog::hub_cache_dir(), repo}; }

Status link_snapshot_file(const RepoCache& c, const std::string& commit, const std::string& path, const std::string& etag) {
  const fs::path link = c.snapshot(commit) / path;
  std::error_code ec;
  fs::create_directories(link.parent_path(), ec);
  if (ec) return error("creating {}: {}", link.parent_path().string(), ec.message());
  fs::path target = "../..";
  const fs::path relative(path);
  for (auto it = relative.begin(); std::next(it) != relative.end(); ++it) target /= "..";
  target /= fs::path("blobs") / etag;
  fs::remove(link, ec);
  fs::create_symlink(target, link, ec);
  if (ec) return error("linking {} -> {}: {}", link.string(), target.string(), ec.message());
  return ok_status();
}

Status write_ref(const RepoCache& c, const std::string& revision, const std::string& commit) {
  const fs::path ref = c.ref(revision);
  std::error_code ec;
  fs::create_directories(ref.parent_path(), ec);
  const fs::path tmp = ref.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << commit;  // no newline, as huggingface_hub writes it
    if (!out.flush()) return error("writing {}: {}", tmp.string(), std::strerror(errno));
  }
  fs::rename(tmp, ref, ec);
  if (ec) return error("renaming {} to {}: {}", tmp.string(), ref.string(), ec.message());
  return ok_status();
}

std::vector<CachedRepo> list_cached(const fs::path& cache) {
  std::vector<CachedRepo> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(cache, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory(ec) || !name.starts_with("models--")) continue;
    CachedRepo r;
    r.repo = repo_from_folder(name);
    r.root = e.path();
    std::ifstream(e.path() / "refs" / "main") >> r.main_commit;
    for (const fs::directory_entry& b : fs::directory_iterator(e.path() / "blobs", ec)) {
      const int64_t size = b.is_regular_file(ec) ? int64_t(b.file_size(ec)) : 0;
      (b.path().extension() == ".incomplete" ? r.incomplete_bytes : r.blob_bytes) += size;
    }
    if (!r.main_commit.empty())
      for (auto it = fs::recursive_directory_iterator(e.path() / "snapshots" / r.main_commit, ec);
           it != fs::recursive_directory_iterator(); it.increment(ec))
        if (!it->is_directory(ec)) ++r.files;
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const CachedRepo& a, const CachedRepo& b) { return a.repo < b.repo; });
  return out;
}

Expected<FileLock> FileLock::acquire(const fs::path& path) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return error("opening the lock {}: {}", path.string(), std::strerror(errno));
  while (::flock(fd, LOCK_EX) != 0)
    if (errno != EINTR) {
      const int e = errno;
      ::close(fd);
      return error("locking {}: {}", path.string(), std::strerror(e));
    }
  return FileLock(fd);
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace kapitsa::cli::hub
