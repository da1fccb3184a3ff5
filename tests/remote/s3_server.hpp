// S3Server: s3rver (an S3-compatible server from npm) on the loopback interface, on a port of its
// own, with a bucket "shards", for the tests that read objects over S3; killed when the object
// goes. STOKE_TEST_S3RVER names the s3rver program (ctest's s3rver fixture installs it); without
// it, available() is false and the test should skip. Objects are put without signing (s3rver
// takes that).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <stoke/remote/url.hpp>
#include <string>
#include <vector>

#include "range_server.hpp"  // spawn

namespace stoke::remote {

class S3Server {
 public:
  static bool available() { return std::getenv("STOKE_TEST_S3RVER") != nullptr; }

  S3Server() : dir_(std::filesystem::temp_directory_path() / ("stoke_s3_test_" + std::to_string(::getpid()))) {
    const char* s3rver = std::getenv("STOKE_TEST_S3RVER");
    if (s3rver == nullptr) throw std::runtime_error("S3Server: STOKE_TEST_S3RVER is not set");
    std::filesystem::create_directories(dir_ / "s3");
    const std::string data = (dir_ / "s3").string();
    FILE* line = spawn(pid_, s3rver, {"-d", data, "-p", "0", "-s", "--configure-bucket", "shards"});
    int port = 0;
    const bool started = std::fscanf(line, " S3rver listening on 127.0.0.1:%d", &port) == 1;
    std::fclose(line);
    if (!started) throw std::runtime_error("s3rver did not start");
    endpoint_ = "http://127.0.0.1:" + std::to_string(port);
  }
  ~S3Server() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  S3Server(const S3Server&) = delete;
  S3Server& operator=(const S3Server&) = delete;

  const std::string& endpoint() const noexcept { return endpoint_; }

  /// Puts `bytes` as the object shards/`key`.
  void put(const std::string& key, const std::vector<std::byte>& bytes) const {
    const std::filesystem::path file = dir_ / "object";
    std::ofstream(file, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    const std::string command = std::string(STOKE_TEST_PYTHON) +
                                " -c \"import sys, urllib.request as u; u.urlopen(u.Request(sys.argv[1], "
                                "data=open(sys.argv[2], 'rb').read(), method='PUT'))\" " +
                                endpoint_ + "/shards/" + key + " " + file.string();
    if (std::system(command.c_str()) != 0) throw std::runtime_error("S3Server: cannot put " + key);
  }

  /// s3rver's credentials (another access key: denied) and its endpoint.
  S3Credentials credentials(const std::string& key = "S3RVER") const {
    return {
        .access_key = key, .secret_key = "S3RVER", .session_token = {}, .region = "us-east-1", .endpoint = endpoint_};
  }

 private:
  std::filesystem::path dir_;
  pid_t pid_ = -1;
  std::string endpoint_;
};

}  // namespace stoke::remote
