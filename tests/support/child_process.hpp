// Running a piece of a test in a fork()ed child, to see what happens to the files it writes
// when it is killed or runs out of disk, without the test process going with it.
#pragma once

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <exception>
#include <stdexcept>
#include <string>

namespace stoke::test {

struct ChildResult {
  bool hung = false;    // still running at the deadline (then killed)
  int exit_code = -1;   // when it exited
  int signal = 0;       // when a signal ended it
  std::string message;  // what it wrote to its pipe
};

enum ChildExit : int { returned = 0, threw = 10, threw_unknown = 11 };

// Runs `work` in a fork()ed child, which exits `returned`, or `threw` with the exception's message
// on the pipe. Waits at most `timeout` (a hang is a failure, not a stuck test).
template <class Work>
ChildResult run_in_child(Work&& work, std::chrono::seconds timeout = std::chrono::seconds(120)) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    int code = returned;
    std::string message;
    try {
      work();
    } catch (const std::exception& error) {
      code = threw;
      message = error.what();
    } catch (...) {
      code = threw_unknown;
    }
    for (std::size_t at = 0; at < message.size();) {
      const ::ssize_t n = ::write(fds[1], message.data() + at, message.size() - at);
      if (n <= 0) break;
      at += static_cast<std::size_t>(n);
    }
    ::_exit(code);  // no atexit handlers, no gtest teardown in the child
  }
  ::close(fds[1]);
  ChildResult result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      result.hung = true;
      break;
    }
    pollfd p{.fd = fds[0], .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ::ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n <= 0) break;  // EOF: the child is gone
    result.message.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (result.hung) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

inline std::string describe(const ChildResult& r) {
  return "child: hung " + std::to_string(r.hung) + ", exit code " + std::to_string(r.exit_code) + ", signal " +
         std::to_string(r.signal) + ", message '" + r.message + "'";
}

}  // namespace stoke::test
