#include "stoke/base/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

namespace stoke::base {

namespace {

// A name beside `path` that no other writer picks: the process id and 32 random bits.
std::filesystem::path temporary_beside(const std::filesystem::path& path) {
  std::random_device device;
  char suffix[48];
  std::snprintf(suffix, sizeof suffix, ".tmp-%ld-%08x", static_cast<long>(::getpid()), device());
  std::filesystem::path temporary = path;
  temporary += suffix;
  return temporary;
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes,
                           std::string_view what) {
  const std::filesystem::path temporary = temporary_beside(path);
  const auto fail = [&](int error, std::string_view hint) {
    ::unlink(temporary.c_str());
    throw std::runtime_error("cannot write the " + std::string(what) + " " + path.string() + ": " +
                             std::strerror(error) + std::string(hint));
  };
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail(errno, " (check that its folder exists and is writable)");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      const int error = wrote < 0 ? errno : EIO;
      ::close(fd);
      fail(error, error == ENOSPC ? " (the disk is full)" : "");
    }
    done += static_cast<std::size_t>(wrote);
  }
  if (::close(fd) != 0) fail(errno, "");
  if (::rename(temporary.c_str(), path.c_str()) != 0) fail(errno, "");
}

}  // namespace stoke::base
