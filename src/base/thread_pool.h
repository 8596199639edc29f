// ThreadPool: a fixed set of workers for data-parallel loops in ops. parallel_for blocks until every
// index has run; the calling thread works too. Calls from several threads take turns (one loop runs at
// a time); a nested call from inside a task runs inline on the calling thread.
// Between loops a worker spins for a short while (KAPITSA_SPIN_US, default 200 µs; 0 turns it off)
// before it sleeps on the condition variable, and the caller spins as long for the last chunk: a decode
// step runs a loop every 50–200 µs, and waking a sleeping thread costs a futex call and an
// inter-processor interrupt each time (about 10% of a 2-core VM's decode step, measured with perf).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kapitsa {

class ThreadPool {
 public:
  explicit ThreadPool(size_t n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }

  // Runs fn(begin, end) over [0, n) split into contiguous ranges of at least `grain` indices.
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t begin, size_t end)>& fn);

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex caller_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t job_n_ = 0, job_chunk_ = 0, next_chunk_ = 0, n_chunks_ = 0;
  std::atomic<size_t> chunks_done_{0};
  std::atomic<size_t> generation_{0};  // written under mutex_, read by spinning workers without it
  bool stopping_ = false;
};

// The process-wide pool used by the CPU ops; its size is KAPITSA_THREADS or the number of cores.
ThreadPool& default_thread_pool();

// Convenience: default_thread_pool().parallel_for(...).
void parallel_for(size_t n, size_t grain, const std::function<void(size_t begin, size_t end)>& fn);

}  // namespace kapitsa
