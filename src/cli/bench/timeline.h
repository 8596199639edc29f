// A generation read to its end with the time each token arrived, and the aggregate decode rate of
// several generations over the window in which all of them decode; the random prompts and greedy
// requests both measure with. Header-only: shared by `kapitsa bench` (cli/bench/suite.cpp) and
// bench/bench_runtime, which measure the same way.
#pragma once

#include "base/status.h"
#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <variant>
#include <vector>

namespace kapitsa::cli::bench {

using Clock = std::chrono::steady_clock;

// n token ids drawn uniformly from [0, vocab).
inline std::vector<int32_t> random_ids(std::mt19937_64& rng, size_t n, int64_t vocab) {
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return ids;
}

// Greedy, exactly max_tokens tokens (end of sequence ignored): what a timing run asks for.
inline runtime::GenerateRequest greedy(std::vector<int32_t> prompt, int max_tokens) {
  runtime::GenerateRequest r;
  r.prompt_ids = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

struct Timeline {
  std::vector<Clock::time_point> tokens;  // when each token was read
  std::vector<int32_t> ids;
  runtime::FinishEvent finish;
};

inline Timeline read_all(runtime::Generation& g) {
  Timeline t;
  runtime::Event e;
  while (g.next(e)) {
    if (auto* token = std::get_if<runtime::TokenEvent>(&e)) {
      t.tokens.push_back(Clock::now());
      t.ids.push_back(token->id);
    } else {
      t.finish = std::get<runtime::FinishEvent>(e);
    }
  }
  return t;
}

// Tokens/s of all the timelines together, counted from the last of their first tokens to the first of
// their last tokens (when every one of them is decoding: no prefill, no sequence already done).
inline Expected<double> aggregate_decode_rate(const std::vector<Timeline>& lines) {
  Clock::time_point start = Clock::time_point::min(), end = Clock::time_point::max();
  for (const Timeline& t : lines) {
    if (t.tokens.size() < 2) return error("a sequence produced {} tokens", t.tokens.size());
    start = std::max(start, t.tokens.front());
    end = std::min(end, t.tokens.back());
  }
  int64_t tokens = 0;
  for (const Timeline& t : lines)
    for (const Clock::time_point& at : t.tokens) tokens += at > start && at <= end;
  const double seconds = std::chrono::duration<double>(end - start).count();
  if (seconds <= 0 || tokens == 0) return error("no window in which every sequence decodes (raise --decode)");
  return double(tokens) / seconds;
}

}  // namespace kapitsa::cli::bench
