// fuzz_files: what the harnesses of parsers that take a path (not bytes) share: a scratch folder
// made once per process (in /dev/shm when there is one, so that writing each input costs no disk
// I/O), removed at exit; whole files written into it; and FNV-1a 64, the checksum of stoke's
// index files, so that a harness can repair it and let mutations reach the checks behind it.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>

namespace stoke::fuzz {

/// A fresh folder, made at the first call; removed (with what is in it) when the process exits.
inline const std::filesystem::path& scratch_dir() {
  struct Dir {
    std::filesystem::path path;
    Dir() {
      std::error_code error;
      const std::filesystem::path base =
          std::filesystem::is_directory("/dev/shm", error) && ::access("/dev/shm", W_OK) == 0
              ? std::filesystem::path("/dev/shm")
              : std::filesystem::temp_directory_path();
      std::string name = (base / "stoke-fuzz-XXXXXX").string();
      if (::mkdtemp(name.data()) == nullptr) {
        std::perror("stoke fuzz: mkdtemp");
        std::abort();
      }
      path = name;
    }
    ~Dir() {
      std::error_code error;
      std::filesystem::remove_all(path, error);
    }
  };
  static const Dir dir;
  return dir.path;
}

/// Writes `bytes` as the whole of `path` (created or truncated). Aborts when it cannot: the
/// harness, not the code under test, failed.
inline void write_file(const std::filesystem::path& path, std::span<const std::uint8_t> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror(("stoke fuzz: " + path.string()).c_str());
    std::abort();
  }
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      std::perror(("stoke fuzz: " + path.string()).c_str());
      std::abort();
    }
    done += static_cast<std::size_t>(wrote);
  }
  ::close(fd);
}

/// FNV-1a 64 of `bytes` with [skip, skip + 8) taken as zero, as packed.hpp and tar_shards.hpp
/// define their index checksums.
inline std::uint64_t fnv1a(std::span<const std::uint8_t> bytes, std::size_t skip) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const unsigned byte = (i >= skip && i - skip < 8) ? 0U : bytes[i];
    hash = (hash ^ byte) * 0x100000001b3ULL;
  }
  return hash;
}

inline void put_u64(std::uint8_t* at, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<std::uint8_t>(value >> (8 * i));
}

inline std::uint32_t get_u32(const std::uint8_t* at) {
  return static_cast<std::uint32_t>(at[0]) | static_cast<std::uint32_t>(at[1]) << 8 |
         static_cast<std::uint32_t>(at[2]) << 16 | static_cast<std::uint32_t>(at[3]) << 24;
}

inline std::uint64_t get_u64(const std::uint8_t* at) {
  return static_cast<std::uint64_t>(get_u32(at)) | static_cast<std::uint64_t>(get_u32(at + 4)) << 32;
}

}  // namespace stoke::fuzz
