#include "stoke/nodes/segmentation_folder.hpp"

#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dataset_support.hpp"
#include "image_files.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kWho = "SegmentationFolder";

// The images under `folder` by their path below it without the extension ("city/0002"). Two files
// of one key are an error naming both.
std::map<std::string, fs::path> by_name(const fs::path& folder, detail::ImageWalker& walker) {
  std::vector<fs::path> files;
  walker.walk(folder, files);
  std::map<std::string, fs::path> named;
  for (fs::path& path : files) {
    std::string key = fs::relative(path, folder).replace_extension().generic_string();
    const auto [at, added] = named.emplace(std::move(key), path);
    if (!added) {
      throw std::runtime_error(std::string(kWho) + ": " + at->second.string() + " and " + path.string() +
                               " share the name " + at->first +
                               "; an image and its mask are matched by name, so each name may appear once in " +
                               folder.string());
    }
  }
  return named;
}

std::string some(const std::vector<std::string>& names) {
  std::string text;
  for (std::size_t i = 0; i < names.size() && i < 5; ++i) text += (i > 0 ? ", " : "") + names[i];
  if (names.size() > 5) text += ", ...";
  return text;
}

}  // namespace

const std::vector<std::string>& default_segmentation_extensions() {
  static const std::vector<std::string> extensions = [] {
    std::vector<std::string> all = default_image_extensions();
    all.emplace_back("dcm");
    return all;
  }();
  return extensions;
}

SegmentationFolder::SegmentationFolder(fs::path root, SegmentationFolderOptions options) : root_(std::move(root)) {
  const fs::path images = root_ / options.images;
  const fs::path masks = root_ / options.masks;
  for (const auto& [folder, what] : {std::pair{images, "images"}, std::pair{masks, "masks"}}) {
    if (!fs::is_directory(folder)) {
      throw std::runtime_error(std::string(kWho) + ": " + folder.string() + " is not a folder; put the " + what +
                               " there (or name the folder with SegmentationFolderOptions::" + what + ")");
    }
  }
  detail::ImageWalker walker(detail::extension_set(options.extensions, kWho), ignored_, std::string(kWho));
  const auto image_files = by_name(images, walker);
  const auto mask_files = by_name(masks, walker);
  std::vector<std::string> no_mask;
  std::vector<std::string> no_image;
  for (const auto& [key, path] : image_files) {
    const auto mask = mask_files.find(key);
    if (mask == mask_files.end()) {
      no_mask.push_back(path.string());
      ignored_.push_back({path.string(), "no mask for it in " + masks.string()});
    } else {
      items_.push_back({path, mask->second});
    }
  }
  for (const auto& [key, path] : mask_files) {
    if (image_files.count(key) == 0) {
      no_image.push_back(path.string());
      ignored_.push_back({path.string(), "a mask without an image in " + images.string()});
    }
  }
  if (!options.allow_unmatched && (!no_mask.empty() || !no_image.empty())) {
    std::string message = std::string(kWho) + " " + root_.string() + ": images and masks do not match:";
    if (!no_mask.empty()) message += " " + std::to_string(no_mask.size()) + " images without a mask (" + some(no_mask) + ")";
    if (!no_image.empty()) {
      message += std::string(no_mask.empty() ? "" : ";") + " " + std::to_string(no_image.size()) +
                 " masks without an image (" + some(no_image) + ")";
    }
    throw std::runtime_error(message + "; add the missing files, or set allow_unmatched to leave them out");
  }
  if (items_.empty()) {
    throw std::runtime_error(std::string(kWho) + " " + root_.string() + ": no image with a mask in " +
                             images.string() + " and " + masks.string());
  }
}

const fs::path& SegmentationFolder::image_path(std::size_t i) const {
  if (i >= items_.size()) detail::item_out_of_range(std::string(kWho) + " " + root_.string(), i, items_.size());
  return items_[i].image;
}

const fs::path& SegmentationFolder::mask_path(std::size_t i) const {
  image_path(i);  // the range check
  return items_[i].mask;
}

int SegmentationFolder::label(std::size_t i) const {
  image_path(i);  // the range check
  return -1;
}

std::string SegmentationFolder::name(std::size_t i) const { return image_path(i).string(); }

Sample SegmentationFolder::read(std::size_t i) const {
  Sample sample = detail::read_file_sample(image_path(i), -1, i);
  sample.mask = Bytes(read_file(mask_path(i).string()));
  sample.mask_name = mask_path(i).string();
  return sample;
}

}  // namespace stoke::nodes
