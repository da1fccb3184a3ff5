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

namespace stoke::remote {

class RangeServer {
 public:
  explicit RangeServer(const std::filesystem::path& folder) {
    int out[2];
    if (::pipe(out) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::close(out[0]);
      ::execl(STOKE_TEST_PYTHON, STOKE_TEST_PYTHON, STOKE_TEST_RANGE_SERVER, folder.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(out[1]);
    FILE* port_line = ::fdopen(out[0], "r");
    if (std::fscanf(port_line, "%d", &port_) != 1) throw std::runtime_error("range_server.py did not start");
    std::fclose(port_line);
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
