// Child processes, temporary folders and signal forwarding for the agent launchers (see process.h).
#include "cli/agents/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#ifdef __APPLE__
#include <mach-o/dyld.h>
#endif

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

extern char** environ;

namespace kapitsa::cli::agents {
namespace fs = std::filesystem;

std::string find_executable(const std::string& name) {
  if (name.empty()) return {};
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : std::string();
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (dir.empty()) dir = ".";  // an empty PATH entry means the current directory
    const std::string candidate = dir + "/" + name;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0)
      return candidate;
    start = end + 1;
  }
  return {};
}

Expected<std::string> self_executable() {
#ifdef __APPLE__
  char buf[4096];
  uint32_t size = sizeof(buf);
  if (_NSGetExecutablePath(buf, &size) == 0) return std::string(buf);
  return error("could not find the kapitsa executable's path");
#else
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return error("could not read /proc/self/exe ({}) to start kapitsa serve", ec.message());
  return p.string();
#endif
}

Expected<TempDir> TempDir::create(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/" + prefix + "-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return error("could not create a temporary folder {}: {}", templ, std::strerror(errno));
  return TempDir(std::string(buf.data()));
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

Expected<std::string> TempDir::write_file(const std::string& name, const std::string& content) const {
  const std::string p = path_ + "/" + name;
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return error("could not write {}: {}", p, std::strerror(errno));
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return error("could not write {}: {}", p, std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return p;
}

namespace {

std::vector<std::string> build_environment(const EnvChanges& changes) {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool drop = changes.set.count(name) > 0;
    for (const auto& u : changes.unset) drop = drop || u == name;
    if (!drop) out.push_back(entry);
  }
  for (const auto& [name, value] : changes.set) out.push_back(name + "=" + value);
  return out;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

Expected<Child> Child::spawn(const std::vector<std::string>& argv, const SpawnOptions& options) {
  if (argv.empty()) return error("nothing to run");
  const std::vector<std::string> env = build_environment(options.env);
  std::vector<char*> c_argv, c_env;
  for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  for (const auto& e : env) c_env.push_back(const_cast<char*>(e.c_str()));
  c_env.push_back(nullptr);
  int out_fd = -1;
  if (!options.stdout_stderr_file.empty()) {
    out_fd = ::open(options.stdout_stderr_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (out_fd < 0) return error("could not open {}: {}", options.stdout_stderr_file, std::strerror(errno));
  }
  // exec failures come back through a close-on-exec pipe: EOF means exec succeeded.
  int report[2];
  if (pipe(report) != 0) return error("pipe: {}", std::strerror(errno));
  fcntl(report[0], F_SETFD, FD_CLOEXEC);
  fcntl(report[1], F_SETFD, FD_CLOEXEC);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return error("fork: {}", std::strerror(errno));
  if (pid == 0) {
    if (options.new_process_group) setpgid(0, 0);
#ifdef __linux__
    if (options.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(1);  // the launcher died before prctl took effect
    }
#endif
    (void)parent;
    if (out_fd >= 0) {
      dup2(out_fd, STDOUT_FILENO);
      dup2(out_fd, STDERR_FILENO);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) signal(s, SIG_DFL);
    execve(c_argv[0], c_argv.data(), c_env.data());
    const int err = errno;
    (void)!::write(report[1], &err, sizeof(err));
    _exit(127);
  }
  ::close(report[1]);
  if (out_fd >= 0) ::close(out_fd);
  int err = 0;
  ssize_t n;
  do n = ::read(report[0], &err, sizeof(err));
  while (n < 0 && errno == EINTR);
  ::close(report[0]);
  Child child(pid);
  if (n == static_cast<ssize_t>(sizeof(err))) {
    child.wait();
    return error("could not run {}: {}", argv[0], std::strerror(err));
  }
  return child;
}

Child::~Child() {
  if (pid_ > 0 && !status_) stop(std::chrono::milliseconds(5000));
}

std::optional<int> Child::poll() {
  if (status_ || pid_ <= 0) return status_;
  int st = 0;
  const pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) status_ = exit_code_of(st);
  return status_;
}

int Child::wait() {
  if (status_) return *status_;
  if (pid_ <= 0) return 0;
  int st = 0;
  pid_t r;
  do r = waitpid(pid_, &st, 0);
  while (r < 0 && errno == EINTR);
  status_ = r == pid_ ? exit_code_of(st) : 1;
  return *status_;
}

int Child::stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return status_.value_or(0);  // moved-from: never kill(-1, ...)
  if (poll()) return *status_;
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    if (poll()) return *status_;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid_, SIGKILL);
  return wait();
}

namespace {

std::atomic<pid_t> g_target{0};
std::atomic<int> g_last_signal{0};
static_assert(std::atomic<pid_t>::is_always_lock_free, "signal handlers need lock-free atomics");
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
struct sigaction g_saved[std::size(kForwarded)];

extern "C" void on_forwarded_signal(int sig, siginfo_t* info, void*) {
  g_last_signal.store(sig);
  const pid_t target = g_target.load();
  if (target <= 0) return;
  // Ctrl-C / Ctrl-\ from the terminal reach the agent directly (same foreground group); forward only
  // what another process sent to the launcher with kill().
  const bool from_terminal = (sig == SIGINT || sig == SIGQUIT) && info != nullptr && info->si_code != SI_USER &&
                             info->si_code != SI_QUEUE;
  if (!from_terminal) kill(target, sig);
}

}  // namespace

SignalForwarder::SignalForwarder() {
  g_target = 0;
  g_last_signal = 0;
  struct sigaction sa {};
  sa.sa_sigaction = on_forwarded_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < std::size(kForwarded); ++i) sigaction(kForwarded[i], &sa, &g_saved[i]);
}

SignalForwarder::~SignalForwarder() {
  for (size_t i = 0; i < std::size(kForwarded); ++i) sigaction(kForwarded[i], &g_saved[i], nullptr);
  g_target = 0;
}

void SignalForwarder::set_target(pid_t pid) { g_target = pid; }

int SignalForwarder::interrupted() const { return g_last_signal.load(); }

}  // namespace kapitsa::cli::agents
