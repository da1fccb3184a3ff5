// RangeServer: range_server.py (beside this file) serving a folder on the loopback interface, on
// a port of its own, for the tests of stoke::remote; killed when the object goes.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <stoke/remote/url.hpp>
#include <string>
#include <vector>

namespace stoke::remote {

/// Starts `program` with `args` (the path is not searched), its stdout on the pipe returned (for
/// the caller to read what it prints and close); its pid goes to `pid`.
inline FILE* spawn(pid_t& pid, const char* program, const std::vector<std::string>& args) {
  int out[2];
  if (::pipe(out) != 0) throw std::runtime_error("pipe");
  std::vector<char*> argv{const_cast<char*>(program)};
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::close(out[0]);
    ::execv(program, argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  return ::fdopen(out[0], "r");
}

class RangeServer {
 public:
  explicit RangeServer(const std::filesystem::path& folder) {
    FILE* port_line = spawn(pid_, STOKE_TEST_PYTHON, {STOKE_TEST_RANGE_SERVER, folder.string()});
    const bool started = std::fscanf(port_line, "%d", &port_) == 1;
    std::fclose(port_line);
    if (!started) throw std::runtime_error("range_server.py did not start");
  }
  ~RangeServer() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  RemoteUrl url(const std::string& path) const {
    return RemoteUrl::parse("http://127.0.0.1:" + std::to_string(port_) + path, S3Credentials{});
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace stoke::remote
