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
#include <filesystem>
#include <string>
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
/// Thread-safety: immutable after construction; read() may be called from any number of threads.
class ImageFolder final : public Dataset {
 public:
  /// Lists `root`. Throws std::runtime_error naming the path and what to do when root does not
  /// exist, is not a folder, has no class folders, or (see options) has an empty class folder.
  explicit ImageFolder(std::filesystem::path root, ImageFolderOptions options = {});

  std::size_t size() const noexcept override { return items_.size(); }
  int label(std::size_t i) const override;
  /// The item's path (root / class / file).
  std::string name(std::size_t i) const override;
  /// Reads the whole file (owned bytes, Encoding::encoded).
  Sample read(std::size_t i) const override;
  const std::vector<std::string>& classes() const noexcept override { return classes_; }
  const std::vector<IgnoredFile>& ignored() const noexcept override { return ignored_; }

  const std::filesystem::path& root() const noexcept { return root_; }
  /// The item's path (root / class / file).
  const std::filesystem::path& path(std::size_t i) const;

 private:
  struct Item {
    std::filesystem::path path;
    int label;
  };

  std::filesystem::path root_;
  std::vector<std::string> classes_;
  std::vector<Item> items_;
  std::vector<IgnoredFile> ignored_;
};

}  // namespace stoke::nodes
