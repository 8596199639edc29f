// Progress of long operations (`kapitsa pull`'s downloads, `kapitsa quantize`): bytes done of the
// total, rate and ETA. To a terminal, one line redrawn five times a second with a bar; otherwise (a
// log, CI) a plain line per finished file and one every 10 seconds. Thread-safe: the download threads
// add bytes, a drawing thread reads them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace kapitsa::cli::hub {

class Progress {
 public:
  // total: bytes of every file to fetch; already: bytes present before this run (resumed, complete);
  // files: how many files (-1: no file count in the line, e.g. kapitsa quantize counts tensor bytes).
  Progress(std::string title, int64_t total, int64_t already, int files, bool terminal, bool quiet);
  ~Progress();  // stops drawing (call finish first for the final line)

  void add(int64_t bytes) { done_ += bytes; }  // negative when a file starts over
  void file_done(const std::string& name, int64_t size);
  void note(const std::string& line);  // a message that must not be overwritten by the bar
  void finish(bool ok);

  // "1.5 GiB", "12.0 MiB", "512 B"
  static std::string bytes(double n);
  // "1h02m", "3m05s", "12s"
  static std::string duration(double seconds);

 private:
  std::string line() const;
  void draw_loop();

  std::string title_;
  int64_t total_, already_;
  int files_;
  bool terminal_, quiet_;
  std::atomic<int64_t> done_;
  std::atomic<int> files_done_{0};
  std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;  // output
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread drawer_;
};

}  // namespace kapitsa::cli::hub
