// ImageFolder: a folder with one subfolder per class, as torchvision.datasets.ImageFolder reads it.
//
//   root/cat/001.jpg          class 0 ("cat"; classes are the sorted folder names)
//   root/cat/more/002.png     class 0 (nested folders inside a class folder are walked)
//   root/dog/003.jpeg         class 1
//   root/ct/004.dcm           class 2 (DICOM, decoded with stoke::dicom)
//   root/ct/IM0005            class 2 with probe_extensionless_dicom, when it is DICOM
//   root/notes.txt            ignored(): not in a class folder
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "stoke/nodes/dataset.hpp"

namespace stoke::nodes {

/// The image extensions ImageFolder counts by default, lower case, without the dot:
/// jpg jpeg png bmp gif webp tif tiff ppm pgm pbm dcm dicom.
const std::vector<std::string>& default_image_extensions();

struct ImageFolderOptions {
  /// File extensions (without the dot) that are images; matched case-insensitively.
  std::vector<std::string> extensions = default_image_extensions();
  /// A class folder without a single image is an error unless this is set (torchvision's
  /// allow_empty); the class then keeps its index and has no items.
  bool allow_empty_classes = false;
  /// Also take files whose name has no extension, or an all-digit one (scanners write "IM0001" or
  /// UIDs such as "1.2.840.113619.2.55.3"), when they are DICOM Part 10 ("DICM" at byte 128).
  /// Each such file's first 132 bytes are read while listing; the others are listed by ignored()
  /// with the reason.
  bool probe_extensionless_dicom = false;
};

/// The items of an image folder, listed once at construction. Item order is deterministic:
/// by class, then within a class folder by directory and file name (byte order, as torchvision's
/// sorted os.walk), so every process and rank sees the same indices.
///
/// Differences from torchvision, both reported through ignored(): entries whose name starts with
/// '.' (".ipynb_checkpoints", "._x.jpg", ".DS_Store") are skipped at every level, and so are files
/// directly in the root. Symbolic links are followed; a link that leads back to a folder already
/// being walked is skipped (no endless loop).
///
/// Memory: the paths lie back to back in one string, with one 8-byte offset per item; labels are
/// not stored per item (items are in class order: each class's items end at a recorded index).
///
/// Thread-safety: immutable after construction; read() may be called from any number of threads.
class ImageFolder final : public Dataset {
 public:
  /// Lists `root`. Throws std::runtime_error naming the path and what to do when root does not
  /// exist, is not a folder, has no class folders, or (see options) has an empty class folder.
  explicit ImageFolder(std::filesystem::path root, ImageFolderOptions options = {});

  std::size_t size() const noexcept override { return ends_.size() - 1; }
  int label(std::size_t i) const override;
  /// The item's path (root / class / file).
  std::string name(std::size_t i) const override;
  /// Reads the whole file (owned bytes, Encoding::encoded).
  Sample read(std::size_t i) const override;
  const std::vector<std::string>& classes() const noexcept override { return classes_; }
  const std::vector<IgnoredFile>& ignored() const noexcept override { return ignored_; }

  const std::filesystem::path& root() const noexcept { return root_; }
  /// The item's path (root / class / file).
  std::filesystem::path path(std::size_t i) const;

 private:
  /// Throws std::out_of_range naming the folder unless i < size().
  void check_index(std::size_t i) const;
  std::string_view name_view(std::size_t i) const noexcept {
    return std::string_view(names_).substr(ends_[i], ends_[i + 1] - ends_[i]);
  }

  std::filesystem::path root_;
  std::vector<std::string> classes_;
  std::string names_;                    ///< the items' paths back to back, no separators
  std::vector<std::uint64_t> ends_{0};   ///< item i's path spans [ends_[i], ends_[i + 1])
  std::vector<std::size_t> class_ends_;  ///< class c's items end at index class_ends_[c]
  std::vector<IgnoredFile> ignored_;
};

}  // namespace stoke::nodes
