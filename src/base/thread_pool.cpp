// ThreadPool implementation: workers pull chunk indices under one mutex; chunks are coarse enough
// (n / (4 × threads), at least `grain`) that the lock is not a bottleneck.
#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace kapitsa {
namespace {
thread_local bool t_inside_pool_task = false;

// How long a thread spins before it sleeps (KAPITSA_SPIN_US, read once).
std::chrono::microseconds spin_time() {
  static const std::chrono::microseconds us = [] {
    const char* env = std::getenv("KAPITSA_SPIN_US");
    return std::chrono::microseconds(env != nullptr ? std::max(0, std::atoi(env)) : 200);
  }();
  return us;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

// Spins until done() or spin_time() has passed; whether done() became true.
template <class Done>
bool spin_until(Done done) {
  const auto limit = spin_time();
  if (limit.count() == 0) return done();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    if (done()) return true;
    cpu_relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() - start > limit) return done();
  }
}
}  // namespace

ThreadPool::ThreadPool(size_t n_threads) {
  n_threads = std::max<size_t>(1, n_threads);
  for (size_t i = 0; i + 1 < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    size_t chunk;
    {
      std::lock_guard lock(mutex_);
      if (job_ == nullptr || next_chunk_ >= n_chunks_) return;
      chunk = next_chunk_++;
    }
    const size_t begin = chunk * job_chunk_;
    const size_t end = std::min(job_n_, begin + job_chunk_);
    t_inside_pool_task = true;
    (*job_)(begin, end);
    t_inside_pool_task = false;
    if (chunks_done_.fetch_add(1) + 1 == n_chunks_) {
      { std::lock_guard lock(mutex_); }  // a caller between its check and its wait sees the notify
      work_done_.notify_all();
    }
  }
}

void ThreadPool::worker_loop() {
  size_t seen_generation = 0;
  for (;;) {
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen_generation; });
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
      if (stopping_) return;
      seen_generation = generation_;
    }
    run_chunks();
  }
}

void ThreadPool::parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  if (workers_.empty() || n <= grain || t_inside_pool_task) {
    fn(0, n);
    return;
  }
  std::lock_guard caller_lock(caller_mutex_);
  const size_t target_chunks = size() * 4;
  const size_t chunk = std::max(grain, (n + target_chunks - 1) / target_chunks);
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    next_chunk_ = 0;
    n_chunks_ = (n + chunk - 1) / chunk;
    chunks_done_ = 0;
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_ready_.notify_all();
  run_chunks();
  const size_t n_chunks = n_chunks_;  // written above by this thread only
  if (!spin_until([&] { return chunks_done_.load(std::memory_order_acquire) == n_chunks; })) {
    std::unique_lock lock(mutex_);
    work_done_.wait(lock, [&] { return chunks_done_ == n_chunks; });
  }
  std::lock_guard lock(mutex_);
  job_ = nullptr;
}

ThreadPool& default_thread_pool() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("KAPITSA_THREADS")) {
      int n = std::atoi(env);
      if (n > 0) return static_cast<size_t>(n);
    }
    return static_cast<size_t>(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn) {
  default_thread_pool().parallel_for(n, grain, fn);
}

}  // namespace kapitsa
