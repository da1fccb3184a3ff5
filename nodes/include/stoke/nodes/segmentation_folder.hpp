// SegmentationFolder: images and their segmentation masks in two parallel folders, matched by
// name.
//
//   root/images/0001.jpg        item 0: root/images/0001.jpg with root/masks/0001.png
//   root/images/city/0002.jpg   item 1: with root/masks/city/0002.png (the same path below each)
//   root/masks/0001.png
//   root/masks/city/0002.png
//
// An image and its mask share their path below images/ and masks/ without the extension, so a
// JPEG photo can have a PNG mask. read() gives the image's bytes with the mask's beside them
// (Sample::mask); a Decoder decodes both (Image::mask) and transforms move them together.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "stoke/nodes/dataset.hpp"
#include "stoke/nodes/image_folder.hpp"

namespace stoke::nodes {

/// default_image_extensions() and "dcm" (DICOM, decoded with stoke::dicom).
const std::vector<std::string>& default_segmentation_extensions();

struct SegmentationFolderOptions {
  std::string images = "images";  ///< the images' folder below the root
  std::string masks = "masks";    ///< the masks' folder below the root
  /// File extensions (without the dot) that are images or masks; matched case-insensitively.
  std::vector<std::string> extensions = default_segmentation_extensions();
  /// An image without a mask, or a mask without an image, is an error naming them (the default),
  /// or with this set is left out and listed by ignored().
  bool allow_unmatched = false;
};

/// The pairs of a segmentation folder, listed once at construction, ordered by the images'
/// relative paths (byte order), so every process sees the same indices. Unlabelled (label -1).
/// Throws std::runtime_error naming the folder and what to do when the root, images/ or masks/
/// is missing or there is no pair; naming the files when two masks (or two images) share a name,
/// and, unless allow_unmatched, when images and masks do not match (up to 5 of each listed, with
/// their counts). Folders are walked as ImageFolder walks them (hidden entries skipped, links
/// followed, a link back into the walk refused, what is left out listed by ignored()).
/// Thread-safe to read.
class SegmentationFolder final : public Dataset {
 public:
  explicit SegmentationFolder(std::filesystem::path root, SegmentationFolderOptions options = {});

  std::size_t size() const noexcept override { return items_.size(); }
  int label(std::size_t i) const override;
  /// The image's path.
  std::string name(std::size_t i) const override;
  /// Reads the image and its mask (owned bytes, Encoding::encoded; Sample::mask_name the mask's
  /// path). Throws std::runtime_error naming the file that cannot be read.
  Sample read(std::size_t i) const override;
  const std::vector<IgnoredFile>& ignored() const noexcept override { return ignored_; }

  const std::filesystem::path& image_path(std::size_t i) const;
  const std::filesystem::path& mask_path(std::size_t i) const;

 private:
  struct Item {
    std::filesystem::path image;
    std::filesystem::path mask;
  };
  std::filesystem::path root_;
  std::vector<Item> items_;
  std::vector<IgnoredFile> ignored_;
};

}  // namespace stoke::nodes
