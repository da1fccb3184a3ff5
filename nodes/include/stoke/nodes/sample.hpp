// Sample: one item as it leaves a source, before decoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "stoke/nodes/image.hpp"

namespace stoke::nodes {

/// Immutable encoded bytes: either owned, or a view into a larger buffer (a memory-mapped shard, a
/// cache entry) that `owner` keeps alive. Cheap to copy (shares the owner). Thread-safe to read.
class Bytes {
 public:
  Bytes() = default;
  /// Takes ownership of `owned`.
  explicit Bytes(std::vector<std::byte> owned);
  /// A view of `view`, valid while `owner` (shared by every copy) lives.
  Bytes(std::shared_ptr<const void> owner, std::span<const std::byte> view) noexcept
      : owner_(std::move(owner)), view_(view) {}

  std::span<const std::byte> span() const noexcept { return view_; }
  const std::byte* data() const noexcept { return view_.data(); }
  std::size_t size() const noexcept { return view_.size(); }
  bool empty() const noexcept { return view_.empty(); }

 private:
  std::shared_ptr<const void> owner_;
  std::span<const std::byte> view_;
};

/// How a sample's bytes are to be read.
enum class Encoding : std::uint8_t {
  encoded,  ///< a file's bytes (JPEG, PNG, ...): the decoder detects the format from the bytes
  raw_rgb,  ///< raw 8-bit RGB, row-major HWC, `width` x `height` (CIFAR records)
};

/// One item of a dataset as read by a source: its bytes, label and identity.
struct Sample {
  Bytes bytes;
  Encoding encoding = Encoding::encoded;
  int width = 0;            ///< raw_rgb only
  int height = 0;           ///< raw_rgb only
  int label = -1;           ///< class index; -1 when the dataset has no labels
  std::uint64_t index = 0;  ///< the item's index in its dataset (stable across epochs)
  std::uint32_t epoch = 0;
  std::string name;  ///< where it came from, for reports: a file path, or "shard.pack#17"
  /// A segmentation mask's encoded file (a PNG of class ids, ...), or empty. The Decoder decodes
  /// it into Image::mask: one channel the size of the (upright) image.
  Bytes mask{};
  std::string mask_name{};  ///< where the mask came from, for reports
  /// Named targets beside `label`, handed on to Image::targets.
  std::map<std::string, Target> targets{};
  /// Detection boxes in the (upright) image's pixels, handed on to Image::boxes.
  Boxes boxes{};
};

/// Reads a whole file. Throws std::runtime_error naming the file and the OS error.
std::vector<std::byte> read_file(const std::string& path);

}  // namespace stoke::nodes
