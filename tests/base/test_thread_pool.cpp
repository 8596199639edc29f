// ThreadPool: every index runs exactly once, nested calls run inline, and calls from several threads
// at once all complete (they take turns) with correct results.
#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace kapitsa {
namespace {

TEST(ThreadPool, EveryIndexRunsOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(10007);
  pool.parallel_for(hits.size(), 7, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) hits[i]++;
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(3);
  std::atomic<int> total{0};
  pool.parallel_for(8, 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i)
      pool.parallel_for(10, 1, [&](size_t b, size_t e) { total += static_cast<int>(e - b); });
  });
  EXPECT_EQ(total.load(), 80);
}

TEST(ThreadPool, ConcurrentCallersAllComplete) {
  ThreadPool pool(3);
  std::vector<std::thread> callers;
  std::vector<long> sums(4, 0);
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 200; ++rep) {
        std::atomic<long> sum{0};
        pool.parallel_for(1000, 10, [&](size_t begin, size_t end) {
          long s = 0;
          for (size_t i = begin; i < end; ++i) s += static_cast<long>(i);
          sum += s;
        });
        sums[static_cast<size_t>(c)] += sum.load();
      }
    });
  for (auto& t : callers) t.join();
  for (long s : sums) EXPECT_EQ(s, 200L * (999L * 1000L / 2));
}

}  // namespace
}  // namespace kapitsa
