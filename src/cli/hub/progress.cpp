// Progress drawing (progress.h): the rate counts only this run's bytes, so a resumed download's ETA is
// not flattered by what was already on disk.
#include "cli/hub/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace kapitsa::cli::hub {

Progress::Progress(std::string title, int64_t total, int64_t already, int files, bool terminal, bool quiet)
    : title_(std::move(title)), total_(total), already_(already), files_(files), terminal_(terminal), quiet_(quiet),
      done_(already), start_(std::chrono::steady_clock::now()) {
  if (!quiet_) drawer_ = std::thread([this] { draw_loop(); });
}

Progress::~Progress() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (drawer_.joinable()) drawer_.join();
}

std::string Progress::bytes(double n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (n >= 1024 && u < 4) n /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", n) : fmt::format("{:.1f} {}", n, units[u]);
}

std::string Progress::duration(double s) {
  if (!(s >= 0) || s > 99 * 3600) return "?";
  const long t = long(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, int(t % 3600 / 60));
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, int(t % 60));
  return fmt::format("{}s", t);
}

std::string Progress::line() const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t done = std::clamp<int64_t>(done_.load(), 0, total_);
  const double rate = elapsed > 0 ? double(std::max<int64_t>(done - already_, 0)) / elapsed : 0;
  const std::string eta = rate > 0 ? Progress::duration(double(total_ - done) / rate) : "?";
  std::string bar;
  if (terminal_) {
    const size_t width = 24, filled = total_ > 0 ? std::min(width, size_t(double(done) / double(total_) * width)) : width;
    bar = "[" + std::string(filled, '#') + std::string(width - filled, ' ') + "] ";
  }
  const std::string files = files_ >= 0 ? fmt::format("  ({}/{} files)", files_done_.load(), files_) : std::string();
  return fmt::format("{} {}{} / {}  {}/s  ETA {}{}", title_, bar, bytes(double(done)), bytes(double(total_)), bytes(rate),
                     eta, files);
}

void Progress::draw_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  auto last_plain = std::chrono::steady_clock::now();
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(200));
    if (stop_) break;
    if (terminal_) {
      std::fprintf(stderr, "\r\033[K%s", line().c_str());
      std::fflush(stderr);
    } else if (std::chrono::steady_clock::now() - last_plain > std::chrono::seconds(10)) {
      std::fprintf(stderr, "%s\n", line().c_str());
      last_plain = std::chrono::steady_clock::now();
    }
  }
}

void Progress::file_done(const std::string& name, int64_t size) {
  ++files_done_;
  if (quiet_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (terminal_) std::fprintf(stderr, "\r\033[K  %s (%s)\n%s", name.c_str(), bytes(double(size)).c_str(), line().c_str());
  else std::fprintf(stderr, "  %s (%s) — %s\n", name.c_str(), bytes(double(size)).c_str(), line().c_str());
  std::fflush(stderr);
}

void Progress::note(const std::string& text) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::fprintf(stderr, "%s%s\n", terminal_ ? "\r\033[K" : "", text.c_str());
  std::fflush(stderr);
}

void Progress::finish(bool ok) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (drawer_.joinable()) drawer_.join();
  if (quiet_) return;
  std::fprintf(stderr, "%s%s%s\n", terminal_ ? "\r\033[K" : "", line().c_str(), ok ? "" : "  (stopped)");
  std::fflush(stderr);
}

}  // namespace kapitsa::cli::hub
