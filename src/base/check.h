// KAPITSA_CHECK: internal invariants. A failed check is a bug in Kapitsa (never bad user input,
// which gets an Error): it prints where and why, then aborts.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace kapitsa::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  std::fprintf(stderr, "kapitsa: internal error at %s:%d: check `%s` failed%s%s\n", file, line, condition,
               message.empty() ? "" : ": ", message.c_str());
  std::abort();
}
}  // namespace kapitsa::detail

#define KAPITSA_CHECK(cond, ...)                                                                  \
  do {                                                                                            \
    if (!(cond)) [[unlikely]]                                                                     \
      ::kapitsa::detail::check_failed(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
  } while (0)
