// TemplateError: the one exception the Jinja engine throws internally. Every public entry point
// (Template::parse, Template::render) catches it and returns a kapitsa::Error, so no exception ever
// leaves the engine. It carries the template position (1-based line and column; 0 = unknown).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kapitsa::text::jinja {

class TemplateError : public std::runtime_error {
 public:
  TemplateError(std::string message, int line = 0, int col = 0)
      : std::runtime_error(std::move(message)), line(line), col(col) {}
  int line;
  int col;
};

// Throws a TemplateError with a fmt-formatted message and no position (the caller adds it).
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw TemplateError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace kapitsa::text::jinja
