// The launcher's loop: poll the ranks' stderr pipes and a self-pipe the signal handler writes
// to (100 ms at most between looks), reap exited ranks with waitpid(WNOHANG), and escalate
// SIGTERM -> SIGKILL on a deadline. Each rank runs in its own process group so that a signal
// reaches what it started too (a shell's children); everything the child does between fork and
// execve is async-signal-safe, and everything it needs (argv, envp, resolved path) is built
// before the fork.
#include "stoker/dist/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>

#include "dist/socket.h"
#include "stoker/core/error.h"

extern char** environ;

namespace stoker::dist {

namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_signal = 0;
int g_signal_pipe = -1;

void on_signal(int sig) {
  g_signal = sig;
  if (g_signal_pipe >= 0) {
    const char c = 1;
    [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe, &c, 1);
  }
}

// Installs the forwarding handlers for the scope's lifetime.
class SignalScope {
 public:
  explicit SignalScope(int pipe_write) {
    g_signal = 0;
    g_signal_pipe = pipe_write;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~SignalScope() {
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &old_[i], nullptr);
    g_signal_pipe = -1;
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

 private:
  // SIGUSR1: SLURM's warning before the end of a job's time (sbatch --signal), which the
  // ranks take as a stop (checkpoint and exit); without a handler it would end the launcher.
  static constexpr std::array<int, 4> kSignals = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};
  std::array<struct sigaction, 4> old_{};
};

std::string resolve_program(const std::string& program) {
  STOKER_CHECK(!program.empty(), "stoker launch: no program given");
  if (program.find('/') != std::string::npos) {
    STOKER_CHECK(::access(program.c_str(), X_OK) == 0, "stoker launch: ", program,
                 " is not an executable file (", std::strerror(errno), ")");
    return program;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    const std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate))
      return candidate;
    start = end + 1;
  }
  STOKER_THROW("stoker launch: program '", program, "' not found in PATH");
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return "was killed by signal " + std::to_string(sig) +
           (name ? std::string(" (") + name + ")" : "");
  }
  return "ended with wait status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

struct Child {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  int err_fd = -1;  // read end of the stderr pipe, -1 when closed
  bool running = false;
  int status = 0;
  std::string partial;  // stderr bytes after the last newline
  std::deque<std::string> tail;
};

void keep_line(Child& c, std::string line, const LaunchOptions& o) {
  if (o.forward_stderr) {
    const std::string out = "[rank " + std::to_string(c.rank) + "] " + line + "\n";
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, out.data(), out.size());
  }
  c.tail.push_back(std::move(line));
  while (static_cast<int>(c.tail.size()) > std::max(o.tail_lines, 0)) c.tail.pop_front();
}

// Reads what the pipe has now; closes it at end of file.
void drain(Child& c, const LaunchOptions& o) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(c.err_fd, buf, sizeof(buf));
    if (n > 0) {
      c.partial.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = c.partial.find('\n')) != std::string::npos) {
        keep_line(c, c.partial.substr(0, nl), o);
        c.partial.erase(0, nl + 1);
      }
      continue;
    }
    if (n < 0 && (errno == EINTR)) continue;
    if (n == 0) {
      ::close(c.err_fd);
      c.err_fd = -1;
      if (!c.partial.empty()) keep_line(c, std::move(c.partial), o);
      c.partial.clear();
    }
    return;  // EAGAIN: nothing more for now
  }
}

void signal_all(std::vector<Child>& children, int sig) {
  for (Child& c : children)
    if (c.running) ::kill(-c.pid, sig);  // the rank's whole process group
}

void report(const LaunchOptions& o, const std::string& line) {
  if (o.quiet) return;
  const std::string out = "stoker launch: " + line + "\n";
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, out.data(), out.size());
}

}  // namespace

LaunchResult launch(const LaunchOptions& o) {
  STOKER_CHECK(o.nproc_per_node >= 1, "stoker launch: --nproc-per-node ", o.nproc_per_node,
               " must be >= 1");
  STOKER_CHECK(o.nnodes >= 1 && o.node_rank >= 0 && o.node_rank < o.nnodes,
               "stoker launch: --node-rank ", o.node_rank, " is not in [0, --nnodes ", o.nnodes,
               ")");
  STOKER_CHECK(o.master_port >= 0 && o.master_port <= 65535, "stoker launch: --master-port ",
               o.master_port, " is not in 0..65535");
  STOKER_CHECK(o.master_port != 0 || o.nnodes == 1,
               "stoker launch: --master-port 0 (a free port) works for one node only");
  STOKER_CHECK(o.kill_grace_s >= 0, "stoker launch: kill grace ", o.kill_grace_s, " must be >= 0");
  const std::string path = resolve_program(o.program);
  LaunchResult result;
  result.master_port = o.master_port;
  if (result.master_port == 0) {
    // Free now; a race with another process taking it is possible but unlikely.
    const detail::Socket probe = detail::listen_on(0, 1);
    result.master_port = detail::bound_port(probe);
  }
  const int world = o.nnodes * o.nproc_per_node;

  // Everything the children need, built before any fork.
  std::map<std::string, std::string> base_env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) base_env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : o.extra_env) base_env[k] = v;
  base_env["WORLD_SIZE"] = std::to_string(world);
  base_env["LOCAL_WORLD_SIZE"] = std::to_string(o.nproc_per_node);
  base_env["GROUP_RANK"] = std::to_string(o.node_rank);
  base_env["MASTER_ADDR"] = o.master_addr;
  base_env["MASTER_PORT"] = std::to_string(result.master_port);
  base_env.erase("TORCHELASTIC_USE_AGENT_STORE");  // nothing else listens on MASTER_PORT

  std::vector<std::string> argv_s;
  argv_s.push_back(o.program);
  for (const std::string& a : o.args) argv_s.push_back(a);
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  int sig_pipe[2];
  STOKER_CHECK(::pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) == 0,
               "stoker launch: pipe failed: ", std::strerror(errno));
  SignalScope signals(sig_pipe[1]);
  const pid_t launcher_pid = ::getpid();

  std::vector<Child> children(static_cast<size_t>(o.nproc_per_node));
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  std::string start_error;
  for (int i = 0; i < o.nproc_per_node; ++i) {
    Child& c = children[static_cast<size_t>(i)];
    c.local_rank = i;
    c.rank = o.node_rank * o.nproc_per_node + i;
    std::map<std::string, std::string> env = base_env;
    env["RANK"] = std::to_string(c.rank);
    env["LOCAL_RANK"] = std::to_string(i);
    std::vector<std::string> env_s;
    for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (std::string& s : env_s) envp.push_back(s.data());
    envp.push_back(nullptr);

    int err_pipe[2];
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
      start_error = std::string("pipe failed: ") + std::strerror(errno);
      break;
    }
    // Signals stay blocked across the fork until the child has reset its handlers: a SIGTERM
    // sent to a rank that has not reached execve yet is then delivered, not lost in a copy of
    // the launcher's handler.
    sigset_t block, previous;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    sigaddset(&block, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &block, &previous);
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Child: async-signal-safe calls only.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher_pid) ::_exit(126);  // the launcher died before prctl
      ::dup2(err_pipe[1], STDERR_FILENO);             // dup2 clears close-on-exec
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      sigaction(SIGINT, &dfl, nullptr);
      sigaction(SIGTERM, &dfl, nullptr);
      sigaction(SIGHUP, &dfl, nullptr);
      sigaction(SIGUSR1, &dfl, nullptr);
      pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      ::execve(path.c_str(), argv.data(), envp.data());
      const char msg[] = "stoker launch: execve failed\n";
      [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
      ::_exit(127);
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    ::close(err_pipe[1]);
    if (pid < 0) {
      ::close(err_pipe[0]);
      start_error = std::string("fork failed: ") + std::strerror(errno);
      break;
    }
    ::setpgid(pid, pid);  // also from the parent: no window where a signal misses the group
    ::fcntl(err_pipe[0], F_SETFL, ::fcntl(err_pipe[0], F_GETFL) | O_NONBLOCK);
    c.pid = pid;
    c.err_fd = err_pipe[0];
    c.running = true;
  }

  int running = 0;
  for (const Child& c : children) running += c.running;
  int interrupted_by = 0;
  bool stopping = !start_error.empty();
  if (stopping) signal_all(children, SIGTERM);
  auto kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(o.kill_grace_s));
  bool killed = false;

  while (running > 0) {
    std::vector<pollfd> fds;
    std::vector<Child*> owners;
    fds.push_back({sig_pipe[0], POLLIN, 0});
    owners.push_back(nullptr);
    for (Child& c : children) {
      if (c.err_fd < 0) continue;
      fds.push_back({c.err_fd, POLLIN, 0});
      owners.push_back(&c);
    }
    ::poll(fds.data(), fds.size(), 100);
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents) drain(*owners[i], o);
    if (fds[0].revents) {
      char buf[64];
      while (::read(sig_pipe[0], buf, sizeof(buf)) > 0) {
      }
    }
    if (g_signal != 0) {
      const int sig = g_signal;
      g_signal = 0;
      if (!interrupted_by) interrupted_by = sig;
      report(o, fmt::format("received signal {}, forwarding it to every rank", sig));
      signal_all(children, sig);
      if (!stopping) {
        stopping = true;
        kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(o.kill_grace_s));
      }
    }
    for (Child& c : children) {
      if (!c.running) continue;
      int status = 0;
      const pid_t r = ::waitpid(c.pid, &status, WNOHANG);
      if (r != c.pid) continue;
      c.running = false;
      c.status = status;
      --running;
      const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (failed && result.failed_rank < 0 && !interrupted_by) {
        if (c.err_fd >= 0) drain(c, o);
        result.failed_rank = c.rank;
        result.exit_code = exit_code_of(status);
        char after[32];
        std::snprintf(after, sizeof(after), " after %.2f s", elapsed());
        result.failure = fmt::format("rank {} (local {}, pid {}) {}{}", c.rank, c.local_rank, c.pid,
                                     describe_status(status), after);
        if (running > 0) {
          report(o, result.failure + "; stopping the other ranks");
          signal_all(children, SIGTERM);
          stopping = true;
          kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(o.kill_grace_s));
        }
      }
    }
    if (stopping && !killed && running > 0 && Clock::now() >= kill_at) {
      report(o, fmt::format("ranks still running {:g} s after SIGTERM: sending SIGKILL",
                            o.kill_grace_s));
      signal_all(children, SIGKILL);
      killed = true;
    }
  }

  // What the ranks wrote last: the pipes may stay open in leftover grandchildren, so read for a
  // short while only.
  const auto drain_until = Clock::now() + std::chrono::milliseconds(200);
  for (Child& c : children) {
    while (c.err_fd >= 0 && Clock::now() < drain_until) {
      pollfd p{c.err_fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) break;
      drain(c, o);
    }
    if (c.err_fd >= 0) {
      ::close(c.err_fd);
      c.err_fd = -1;
      if (!c.partial.empty()) keep_line(c, std::move(c.partial), o);
    }
  }
  ::close(sig_pipe[0]);
  ::close(sig_pipe[1]);

  for (const Child& c : children)
    result.exit_codes.push_back(c.pid > 0 ? exit_code_of(c.status) : 1);
  if (!start_error.empty()) {
    if (result.failed_rank < 0) {
      result.exit_code = 1;
      result.failure = "could not start every rank: " + start_error;
    }
  }
  if (interrupted_by && result.failed_rank < 0) {
    result.exit_code = 128 + interrupted_by;
    result.failure = fmt::format("interrupted by signal {}", interrupted_by);
  }
  if (result.failed_rank >= 0) {
    const Child& f =
        children[static_cast<size_t>(result.failed_rank - o.node_rank * o.nproc_per_node)];
    result.failed_stderr_tail.assign(f.tail.begin(), f.tail.end());
    std::string text = result.failure;
    if (!f.tail.empty()) {
      text +=
          fmt::format("; its last {} stderr line{}:", f.tail.size(), f.tail.size() == 1 ? "" : "s");
      for (const std::string& l : f.tail) text += "\n  " + l;
    } else {
      text += "; it wrote nothing to stderr";
    }
    report(o, "FAILED: " + text);
  } else if (!result.failure.empty()) {
    report(o, result.failure);
  }
  return result;
}

}  // namespace stoker::dist
