// Logging implementation: stderr, level from KAPITSA_LOG.
#include "base/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace kapitsa::log {
namespace {
Level initial_level() {
  const char* env = std::getenv("KAPITSA_LOG");
  if (env == nullptr) return Level::info;
  if (std::strcmp(env, "error") == 0) return Level::error;
  if (std::strcmp(env, "warn") == 0) return Level::warn;
  if (std::strcmp(env, "debug") == 0) return Level::debug;
  return Level::info;
}
std::atomic<Level> g_level{initial_level()};
std::mutex g_mutex;
}  // namespace

Level level() { return g_level.load(std::memory_order_relaxed); }
void set_level(Level l) { g_level.store(l); }

void write(Level l, const std::string& message) {
  if (l > level()) return;
  static const char* names[] = {"error", "warning", "info", "debug"};
  std::lock_guard lock(g_mutex);
  std::fprintf(stderr, "kapitsa: %s%s%s\n", l == Level::info ? "" : names[static_cast<int>(l)],
               l == Level::info ? "" : ": ", message.c_str());
}

void progress(const std::string& what, size_t done, size_t total) {
  if (level() < Level::info || total == 0) return;
  std::lock_guard lock(g_mutex);
  // Quick operations stay silent: lines start once the operation has run for half a second.
  static std::chrono::steady_clock::time_point started;
  static bool shown = false;
  if (done <= 1) {
    started = std::chrono::steady_clock::now();
    shown = false;
  }
  if (!shown && std::chrono::steady_clock::now() - started < std::chrono::milliseconds(500)) return;
  shown = true;
  static const bool tty = isatty(STDERR_FILENO);
  const int percent = static_cast<int>(100 * done / total);
  if (tty) {
    std::fprintf(stderr, "\r%s: %zu/%zu (%d%%)%s", what.c_str(), done, total, percent, done == total ? "\n" : "");
  } else if (done == total || (done * 10 / total) != ((done - 1) * 10 / total)) {
    std::fprintf(stderr, "%s: %zu/%zu (%d%%)\n", what.c_str(), done, total, percent);
  }
  std::fflush(stderr);
}

}  // namespace kapitsa::log
