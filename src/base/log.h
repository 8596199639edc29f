// Minimal levelled logging to stderr. The level comes from KAPITSA_LOG (error|warn|info|debug),
// default info. Progress for long operations goes through log::progress (one line, rewritten).
#pragma once

#include <fmt/format.h>

#include <string>

namespace kapitsa::log {

enum class Level { error = 0, warn = 1, info = 2, debug = 3 };

Level level();
void set_level(Level level);
void write(Level level, const std::string& message);

template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) { write(Level::error, fmt::format(f, std::forward<Args>(args)...)); }
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) { write(Level::warn, fmt::format(f, std::forward<Args>(args)...)); }
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (level() >= Level::info) write(Level::info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (level() >= Level::debug) write(Level::debug, fmt::format(f, std::forward<Args>(args)...));
}

// Progress of a long operation, e.g. progress("loading", 12, 40): rewrites one stderr line when it is a
// terminal, prints every ~10% otherwise; done == total ends the line. Silent for the first half second
// (done == 1 starts the clock), so quick operations print nothing.
void progress(const std::string& what, size_t done, size_t total);

}  // namespace kapitsa::log
