#include "mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace stoke::nodes::detail {

namespace {

[[noreturn]] void fail(const std::string& path, const char* what, int error) {
  throw std::runtime_error(path + ": " + what + ": " + std::strerror(error));
}

std::size_t page_size() noexcept {
  static const std::size_t size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path, bool keep_open) : path_(path.string()) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path_, "cannot open", errno);
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    fail(path_, "cannot stat", error);
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    throw std::runtime_error(path_ + ": not a regular file");
  }
  size_ = static_cast<std::size_t>(info.st_size);
  if (size_ > 0) {
    void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapped == MAP_FAILED) {
      const int error = errno;
      ::close(fd);
      fail(path_, "cannot memory-map", error);
    }
    data_ = static_cast<const std::byte*>(mapped);
  }
  if (keep_open) {
    fd_ = fd;
  } else {
    ::close(fd);  // the mapping keeps the file open
  }
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      fd_(std::exchange(other.fd_, -1)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

std::vector<std::byte> MappedFile::read_at(std::uint64_t offset, std::size_t size, const std::string& what) const {
  if (fd_ < 0) throw std::logic_error(path_ + ": read_at() on a MappedFile made without keep_open");
  std::vector<std::byte> out(size);
  std::size_t done = 0;
  while (done < size) {
    const ::ssize_t got = ::pread(fd_, out.data() + done, size - done, static_cast<::off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      fail(
          what,
          ("cannot read " + std::to_string(size) + " bytes at byte " + std::to_string(offset) + " of " + path_).c_str(),
          errno);
    if (got == 0) {
      struct stat info {};
      const std::string now = ::fstat(fd_, &info) == 0 ? std::to_string(info.st_size) + " bytes" : "shorter";
      throw std::runtime_error(what + ": its " + std::to_string(size) + " bytes at byte " + std::to_string(offset) +
                               " are not all in " + path_ + ", which is now " + now +
                               " (truncated since it was opened?)");
    }
    done += static_cast<std::size_t>(got);
  }
  return out;
}

void MappedFile::advise_random() const noexcept {
  if (data_ != nullptr) ::madvise(const_cast<std::byte*>(data_), size_, MADV_RANDOM);
  if (fd_ >= 0) ::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);  // read_at()'s reads
}

void MappedFile::advise_sequential() const noexcept {
  if (data_ != nullptr) ::madvise(const_cast<std::byte*>(data_), size_, MADV_SEQUENTIAL);
  if (fd_ >= 0) ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
}

void MappedFile::prefetch(std::size_t offset, std::size_t size) const noexcept {
  if (data_ == nullptr || size == 0 || offset >= size_) return;
  // madvise wants a page-aligned start; the mapping itself starts on a page boundary.
  const std::size_t begin = offset / page_size() * page_size();
  const std::size_t end = std::min(size_, offset + size);
  ::madvise(const_cast<std::byte*>(data_) + begin, end - begin, MADV_WILLNEED);
}

}  // namespace stoke::nodes::detail
