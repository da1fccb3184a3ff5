#include "stoke/nodes/sample.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace stoke::nodes {

Bytes::Bytes(std::vector<std::byte> owned) {
  auto holder = std::make_shared<const std::vector<std::byte>>(std::move(owned));
  view_ = std::span<const std::byte>(holder->data(), holder->size());
  owner_ = std::move(holder);
}

namespace {

[[noreturn]] void fail(const std::string& path, const char* what) {
  throw std::runtime_error(path + ": " + what + ": " + std::strerror(errno));
}

// Closes a descriptor on every path out of read_file.
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::vector<std::byte> read_file(const std::string& path) {
  FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) fail(path, "cannot open");
  struct stat info {};
  if (::fstat(file.fd, &info) != 0) fail(path, "cannot stat");
  if (!S_ISREG(info.st_mode)) throw std::runtime_error(path + ": not a regular file");

  std::vector<std::byte> bytes(static_cast<std::size_t>(info.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(file.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path, "cannot read");
    }
    if (n == 0) break;  // the file shrank while being read
    done += static_cast<std::size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

}  // namespace stoke::nodes
