// Helpers for the dataset tests: a temporary folder and files with known bytes.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <opencv2/core.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "stoke/nodes/jpeg_encode.hpp"
#include "stoke/nodes/sample.hpp"
#include "temp_dir.hpp"

namespace stoke::nodes::test {

using stoke::test::TempDir;  // tests/support/temp_dir.hpp

inline void write_bytes(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

inline void write_text(const std::filesystem::path& path, std::string_view text) {
  write_bytes(path, std::as_bytes(std::span(text.data(), text.size())));
}

/// Bytes that differ for every `seed` (not an image: the dataset tests do not decode).
inline std::vector<std::byte> distinct_bytes(std::uint32_t seed, std::size_t size = 64) {
  std::vector<std::byte> bytes(size);
  std::uint32_t state = seed * 2654435761U + 12345U;
  for (std::byte& b : bytes) {
    state = state * 1664525U + 1013904223U;
    b = static_cast<std::byte>(state >> 24);
  }
  return bytes;
}

/// A small JPEG: a w x h RGB gradient offset by `seed`.
inline std::vector<std::byte> small_jpeg(int seed, int width = 24, int height = 16) {
  cv::Mat image(height, width, CV_8UC3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      image.at<cv::Vec3b>(y, x) = cv::Vec3b(static_cast<std::uint8_t>(x * 9 + seed), static_cast<std::uint8_t>(y * 13),
                                            static_cast<std::uint8_t>(seed * 31));
    }
  }
  return encode_jpeg(image, 90);
}

inline std::vector<std::byte> to_vector(const Bytes& bytes) { return {bytes.span().begin(), bytes.span().end()}; }

/// The message of the std::exception that `f()` throws; "" when it throws none.
template <class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

}  // namespace stoke::nodes::test
