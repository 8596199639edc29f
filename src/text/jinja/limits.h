// Limits: what one render may consume. A template is untrusted input (it ships with a model), so
// every render is bounded in call depth, work, output and string size; exceeding one is an error.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kapitsa::text::jinja {

struct Limits {
  int max_call_depth = 64;            // nested macro / caller / recursive-loop calls
  int64_t max_steps = 50'000'000;     // evaluated nodes + loop iterations + bytes/64 of built strings
  size_t max_output = 64u << 20;      // bytes of rendered text
  size_t max_string = 64u << 20;      // bytes of any single string value
  int64_t max_range = 1'000'000;      // items a range() or repetition may produce
};

}  // namespace kapitsa::text::jinja
