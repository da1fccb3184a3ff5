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

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path.string()) {
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
  ::close(fd);  // the mapping keeps the file open
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

void MappedFile::advise_random() const noexcept {
  if (data_ != nullptr) ::madvise(const_cast<std::byte*>(data_), size_, MADV_RANDOM);
}

void MappedFile::advise_sequential() const noexcept {
  if (data_ != nullptr) ::madvise(const_cast<std::byte*>(data_), size_, MADV_SEQUENTIAL);
}

void MappedFile::prefetch(std::size_t offset, std::size_t size) const noexcept {
  if (data_ == nullptr || size == 0 || offset >= size_) return;
  // madvise wants a page-aligned start; the mapping itself starts on a page boundary.
  const std::size_t begin = offset / page_size() * page_size();
  const std::size_t end = std::min(size_, offset + size);
  ::madvise(const_cast<std::byte*>(data_) + begin, end - begin, MADV_WILLNEED);
}

}  // namespace stoke::nodes::detail
