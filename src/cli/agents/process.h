// Child processes for the agent launchers: finding an executable on PATH, a private temporary folder
// (removed on destruction), spawning a process with a changed environment, forwarding the launcher's
// signals to it, and turning its wait status into an exit code. POSIX only; holds no agent knowledge.
// Invariant: a Child that was started is waited for exactly once (wait() or the destructor).
#pragma once

#include "base/status.h"

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kapitsa::cli::agents {

// `name` looked up in $PATH (a name containing '/' is taken as a path). Empty when not found or not
// executable.
std::string find_executable(const std::string& name);

// The running kapitsa executable (/proc/self/exe on Linux), for starting `kapitsa serve`.
Expected<std::string> self_executable();

// A mode-0700 folder under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  static Expected<TempDir> create(const std::string& prefix);
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempDir& operator=(TempDir&&) = delete;
  TempDir(const TempDir&) = delete;
  ~TempDir();
  const std::string& path() const { return path_; }
  // Writes `content` to path()/name (mode 0600) and returns the full path.
  Expected<std::string> write_file(const std::string& name, const std::string& content) const;

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Environment changes for a child: `set` entries override or add, `unset` names are removed.
struct EnvChanges {
  std::map<std::string, std::string> set;
  std::vector<std::string> unset;
};

struct SpawnOptions {
  EnvChanges env;
  std::string stdout_stderr_file;  // empty: inherit the terminal; else both go to this file (appended)
  bool new_process_group = false;  // true: terminal Ctrl-C does not reach it (the server)
  bool die_with_parent = false;    // Linux: SIGTERM when the launcher dies, even by SIGKILL
};

class Child {
 public:
  static Expected<Child> spawn(const std::vector<std::string>& argv, const SpawnOptions& options);
  Child(Child&& other) noexcept : pid_(other.pid_), status_(other.status_) { other.pid_ = -1; }
  Child& operator=(Child&&) = delete;
  Child(const Child&) = delete;
  ~Child();

  pid_t pid() const { return pid_; }
  // Non-blocking: the exit code once the child has ended (128+N when killed by signal N).
  std::optional<int> poll();
  // Blocks until the child ends; EINTR (a forwarded signal) is retried.
  int wait();
  // SIGTERM, wait up to `grace`, then SIGKILL. Returns the exit code.
  int stop(std::chrono::milliseconds grace);

 private:
  explicit Child(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// While alive, SIGINT/SIGTERM/SIGHUP/SIGQUIT sent to the launcher are passed to `target` (set_target),
// except a SIGINT/SIGQUIT the terminal generated: the terminal already delivers those to the whole
// foreground process group, agent included, and a second copy would make an agent that counts Ctrl-C
// presses (Claude Code, opencode) quit. Before a target is set, signals are only recorded
// (interrupted()), so the launcher can stop the server it is waiting for.
class SignalForwarder {
 public:
  SignalForwarder();
  ~SignalForwarder();
  SignalForwarder(const SignalForwarder&) = delete;
  SignalForwarder& operator=(const SignalForwarder&) = delete;
  void set_target(pid_t pid);
  // The last signal received (0: none).
  int interrupted() const;
};

}  // namespace kapitsa::cli::agents
