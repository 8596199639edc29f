// The download plan and the worker threads behind pull (pull.h).
#include "cli/hub/pull.h"

#include "cli/hub/hub_api.h"
#include "cli/hub/hub_cache.h"
#include "cli/hub/progress.h"
#include "cli/hub/sha256.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace kapitsa::cli::hub {
namespace fs = std::filesystem;

namespace {

struct Job {
  RemoteFile file;
  fs::path final_path, incomplete_path, lock_path;
  std::string url;
};

int64_t size_or_zero(const fs::path& p) {
  std::error_code ec;
  const auto s = fs::file_size(p, ec);
  return ec ? 0 : int64_t(s);
}

bool complete(const Job& j) {
  std::error_code ec;
  return fs::is_regular_file(j.final_path, ec) && size_or_zero(j.final_path) == j.file.size;
}

std::string write_error_text(int err, const fs::path& path) {
  return fmt::format("writing {}: {} — the disk is full or a file size limit (ulimit -f) stops the download; free "
                     "space (or set HF_HUB_CACHE / --local-dir to a larger disk) and run the same command: it "
                     "resumes from the part already written",
                     path.string(), std::strerror(err));
}

bool retryable(const HttpResult& r) {
  return !r.transport.empty() || r.status == 429 || r.status == 502 || r.status == 503 || r.status == 504;
}

Status truncate_file(const fs::path& p) {
  std::error_code ec;
  fs::resize_file(p, 0, ec);
  if (ec) return error("emptying {}: {}", p.string(), ec.message());
  return ok_status();
}

// Downloads one file to its final path, resuming from and verifying through its .incomplete part.
Status fetch_one(Http& http, const Job& j, const HubConfig& config, int retries, Progress& progress,
                 const std::atomic<bool>& cancel) {
  std::optional<FileLock> lock;
  if (!j.lock_path.empty()) {
    KAPITSA_TRY(FileLock l, FileLock::acquire(j.lock_path));
    lock.emplace(std::move(l));
  }
  if (complete(j)) {  // another process finished it while we waited for the lock
    progress.add(j.file.size - size_or_zero(j.incomplete_path));
    progress.file_done(j.file.path, j.file.size);
    return ok_status();
  }
  std::error_code ec;
  fs::create_directories(j.incomplete_path.parent_path(), ec);
  fs::create_directories(j.final_path.parent_path(), ec);
  int network_failures = 0, hash_failures = 0;
  for (;;) {
    if (cancel.load()) return error("{}: stopped because another file failed", j.file.path);
    const int fd = ::open(j.incomplete_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return error("{}", write_error_text(errno, j.incomplete_path));
    int64_t offset = ::lseek(fd, 0, SEEK_END);
    if (offset > j.file.size) {  // longer than the file: not a prefix of it
      if (::ftruncate(fd, 0) != 0 || ::lseek(fd, 0, SEEK_SET) != 0) {
        const int e = errno;
        ::close(fd);
        return error("{}", write_error_text(e, j.incomplete_path));
      }
      progress.add(-offset);
      offset = 0;
    }
    HttpResult r;
    if (offset < j.file.size)
      r = http.download(j.url, config.auth_headers(), fd, offset, [&](int64_t n) { progress.add(n); }, &cancel);
    else
      r.status = 200;  // every byte is already there: verify it
    if (::close(fd) != 0 && r.write_errno == 0) r.write_errno = errno;
    if (r.write_errno != 0) return error("{}", write_error_text(r.write_errno, j.incomplete_path));
    if (cancel.load()) return error("{}: stopped because another file failed", j.file.path);
    if (r.status == 416) {  // the range is past the end: the part is not a prefix of this file
      KAPITSA_RETURN_IF_ERROR(truncate_file(j.incomplete_path));
      progress.add(-offset);
      if (++network_failures > retries) return error("{}: the server refuses to resume it (HTTP 416)", j.file.path);
      continue;
    }
    const int64_t have = size_or_zero(j.incomplete_path);
    if (retryable(r) || (r.ok() && have < j.file.size)) {  // cut mid-file: resume from what arrived
      const std::string why = r.ok() ? fmt::format("the connection closed at {} of {} bytes", have, j.file.size)
                                     : http_error_text(r, j.url, j.file.path, config);
      if (++network_failures > retries)
        return error("{} (gave up after {} tries; the {} already downloaded are kept in {} and the same command resumes)",
                     why, retries + 1, Progress::bytes(double(have)), j.incomplete_path.string());
      const double wait_s = std::min(0.25 * (1 << std::min(network_failures, 5)), 8.0);
      progress.note(fmt::format("kapitsa pull: {}: {}; resuming from byte {} in {:.1f}s", j.file.path,
                                r.ok() ? why : (r.transport.empty() ? fmt::format("HTTP {}", r.status) : r.transport),
                                have, wait_s));
      std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
      continue;
    }
    if (!r.ok()) return error("{}", http_error_text(r, j.url, j.file.path, config));
    bool bad = have != j.file.size;
    std::string got;
    if (!bad && !j.file.sha256.empty()) {
      KAPITSA_TRY(got, sha256_file(j.incomplete_path));
      bad = got != j.file.sha256;
    }
    if (bad) {
      const std::string what = have != j.file.size ? fmt::format("{} bytes instead of {}", have, j.file.size)
                                                   : fmt::format("sha256 {} instead of the Hub's {}", got, j.file.sha256);
      fs::remove(j.incomplete_path, ec);  // not a prefix of the file: nothing to resume from
      progress.add(-have);
      if (++hash_failures > 1)
        return error("{}: the download is corrupt twice in a row ({}); nothing was kept — check the network or proxy",
                     j.file.path, what);
      progress.note(fmt::format("kapitsa pull: {}: corrupt download ({}); downloading it again", j.file.path, what));
      continue;
    }
    fs::rename(j.incomplete_path, j.final_path, ec);
    if (ec) return error("renaming {} to {}: {}", j.incomplete_path.string(), j.final_path.string(), ec.message());
    progress.file_done(j.file.path, j.file.size);
    return ok_status();
  }
}

// Free bytes on the file system holding `dir` (or its nearest existing parent).
int64_t free_bytes(fs::path dir) {
  std::error_code ec;
  while (!dir.empty() && !fs::exists(dir, ec)) dir = dir.parent_path();
  struct statvfs s {};
  if (::statvfs(dir.empty() ? "." : dir.c_str(), &s) != 0) return -1;
  return int64_t(s.f_bavail) * int64_t(s.f_frsize);
}

Expected<PullResult> offline_result(const PullRequest& req, const HubConfig& config) {
  const RepoCache cache = repo_cache(req.repo);
  std::string commit;
  if (req.local_dir.empty()) std::ifstream(cache.ref(req.revision)) >> commit;
  if (req.revision.size() == 40) commit = req.revision;
  std::error_code ec;
  const fs::path base = req.local_dir.empty() ? (commit.empty() ? fs::path() : cache.snapshot(commit)) : fs::path(req.local_dir);
  const fs::path target = req.file.empty() ? base : base / req.file;
  if (!base.empty() && fs::exists(target, ec)) return PullResult{target, 0, 0};
  return error("HF_HUB_OFFLINE is set, so {} is not contacted, and {}{} at {} is not in {}; unset HF_HUB_OFFLINE to download it",
               config.endpoint, req.repo, req.file.empty() ? "" : " " + req.file, req.revision,
               req.local_dir.empty() ? cache.cache.string() : req.local_dir);
}

}  // namespace

Expected<PullResult> pull(const PullRequest& req) {
  const HubConfig config = HubConfig::from_env();
  if (config.offline) return offline_result(req, config);
  Http http;
  KAPITSA_TRY(RepoRevision rev, fetch_revision(http, config, req.repo, req.revision));
  std::vector<RemoteFile> files;
  for (const RemoteFile& f : rev.files)
    if (req.file.empty() || f.path == req.file) files.push_back(f);
  if (files.empty()) {
    std::string names;
    for (const RemoteFile& f : rev.files) names += (names.empty() ? "" : ", ") + f.path;
    return error("{} at {} has no file '{}' (it has: {})", req.repo, req.revision, req.file, names);
  }

  const RepoCache cache = repo_cache(req.repo);
  const bool to_cache = req.local_dir.empty();
  std::vector<Job> jobs;
  int64_t total = 0, already = 0, present = 0;
  for (const RemoteFile& f : files) {
    Job j;
    j.file = f;
    j.url = resolve_url(config, req.repo, rev.commit, f.path);
    if (to_cache) {
      j.final_path = cache.blob(f.etag()), j.incomplete_path = cache.incomplete(f.etag()), j.lock_path = cache.lock(f.etag());
      if (std::any_of(jobs.begin(), jobs.end(), [&](const Job& o) { return o.file.etag() == f.etag(); })) continue;
    } else {
      j.final_path = fs::path(req.local_dir) / f.path;
      j.incomplete_path = fs::path(req.local_dir) / ".cache" / "huggingface" / "download" / (f.path + ".incomplete");
    }
    if (complete(j)) {
      present += f.size;
      continue;
    }
    total += f.size;
    already += std::min(size_or_zero(j.incomplete_path), f.size);
    jobs.push_back(std::move(j));
  }

  const fs::path where = to_cache ? cache.root() : fs::path(req.local_dir);
  if (const int64_t free = free_bytes(where); free >= 0 && free < total - already)
    return error("{} needs {} more and only {} is free at {}: free space, or set HF_HUB_CACHE (or --local-dir) to a "
                 "larger disk",
                 req.repo, Progress::bytes(double(total - already)), Progress::bytes(double(free)), where.string());

  std::signal(SIGXFSZ, SIG_IGN);  // past a file size limit, write() fails with EFBIG instead of killing us
  PullResult result;
  result.files = int(files.size());
  if (!jobs.empty()) {
    Progress progress(req.repo, total, already, int(jobs.size()), ::isatty(STDERR_FILENO) != 0, req.quiet);
    std::atomic<size_t> next{0};
    std::atomic<bool> cancel{false};
    std::mutex error_mutex;
    std::optional<Error> first_error;
    auto worker = [&] {
      Http h;
      for (size_t i; (i = next++) < jobs.size();) {
        Status s = fetch_one(h, jobs[i], config, req.retries, progress, cancel);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (!first_error && !cancel.load()) first_error = s.error();
          cancel = true;
          return;
        }
      }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < std::clamp<int>(req.jobs, 1, int(jobs.size())); ++t) threads.emplace_back(worker);
    for (std::thread& t : threads) t.join();
    progress.finish(!first_error);
    if (first_error) return *first_error;
    result.downloaded_bytes = total - already;
  }
  if (!to_cache) {
    result.path = req.file.empty() ? fs::path(req.local_dir) : fs::path(req.local_dir) / req.file;
    return result;
  }
  // Every blob is complete: now the snapshot links, then the ref (what readers look up first).
  for (const RemoteFile& f : files) KAPITSA_RETURN_IF_ERROR(link_snapshot_file(cache, rev.commit, f.path, f.etag()));
  if (req.revision != rev.commit) KAPITSA_RETURN_IF_ERROR(write_ref(cache, req.revision, rev.commit));
  result.path = req.file.empty() ? cache.snapshot(rev.commit) : cache.snapshot(rev.commit) / req.file;
  return result;
}

}  // namespace kapitsa::cli::hub
