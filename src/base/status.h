// Error and Expected<T>: results at module boundaries (files, network, user input).
// An Error carries a message written for a person (what was wrong and where) and a kind, set where the
// error is made, that callers branch on (the server picks the HTTP status from it; never from the text).
// Internal invariants use KAPITSA_CHECK (check.h) instead. Expected<T> is a minimal stand-in for
// C++23 std::expected.
#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>
#include <variant>

namespace kapitsa {

// What kind of failure an Error is. Errors at module boundaries are mostly about their input, so that
// is the default; name another kind where the cause is another.
enum class ErrorKind {
  invalid_argument,  // the input is wrong: a request field, a flag, a file's contents (the default)
  context_too_long,  // a prompt that does not fit the context
  not_found,         // a named thing does not exist: a model, an endpoint
  unauthenticated,   // missing or wrong credentials
  too_large,         // an input over a size limit (a request body)
  unavailable,       // not now: the model is still loading, the server is shutting down
  overloaded,        // too many requests at once: try again later
  internal,          // a failure that is not the caller's fault
};

struct Error {
  std::string message;
  ErrorKind kind = ErrorKind::invalid_argument;
};

// Builds an Error from a fmt format string: `return error("{}: tensor '{}' missing", path, name);`
template <typename... Args>
Error error(fmt::format_string<Args...> format, Args&&... args) {
  return Error{fmt::format(format, std::forward<Args>(args)...)};
}

// The same with a kind: `return error(ErrorKind::not_found, "model '{}' does not exist", id);`
template <typename... Args>
Error error(ErrorKind kind, fmt::format_string<Args...> format, Args&&... args) {
  return Error{fmt::format(format, std::forward<Args>(args)...), kind};
}

template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : value_(std::move(value)) {}
  Expected(Error e) : value_(std::move(e)) {}

  bool ok() const { return std::holds_alternative<T>(value_); }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<T>(value_); }
  const T& value() const& { return std::get<T>(value_); }
  T&& value() && { return std::get<T>(std::move(value_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<Error>(value_); }

 private:
  std::variant<T, Error> value_;
};

// Status: Expected without a value.
struct Ok {};
using Status = Expected<Ok>;
inline Status ok_status() { return Ok{}; }

}  // namespace kapitsa

// KAPITSA_TRY(decl, expr): evaluate an Expected; on error return it from the enclosing function,
// otherwise bind the value: `KAPITSA_TRY(auto file, MappedFile::open(path));`
#define KAPITSA_CONCAT_INNER(a, b) a##b
#define KAPITSA_CONCAT(a, b) KAPITSA_CONCAT_INNER(a, b)
#define KAPITSA_TRY(decl, expr) KAPITSA_TRY_IMPL(KAPITSA_CONCAT(try_result_, __LINE__), decl, expr)
#define KAPITSA_TRY_IMPL(tmp, decl, expr)      \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return ::kapitsa::Error{tmp.error()}; \
  decl = std::move(tmp).value()

// KAPITSA_RETURN_IF_ERROR(status_expr): propagate an error from an expression returning Status.
#define KAPITSA_RETURN_IF_ERROR(expr)                                   \
  do {                                                                  \
    auto status_ = (expr);                                              \
    if (!status_.ok()) return ::kapitsa::Error{status_.error()};        \
  } while (0)
