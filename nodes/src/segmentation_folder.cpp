#include "stoke/nodes/segmentation_folder.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// The files of `folder` by their path below it without the extension ("city/0002"); files of other
// extensions and hidden entries go to `ignored`. Two files of one key are an error naming both.
std::map<std::string, fs::path> list(const fs::path& folder, const std::set<std::string>& extensions,
                                     std::vector<IgnoredFile>& ignored) {
  std::map<std::string, fs::path> files;
  fs::recursive_directory_iterator it(folder, fs::directory_options::follow_directory_symlink);
  for (; it != fs::recursive_directory_iterator(); ++it) {
    const fs::path& path = it->path();
    if (path.filename().string().starts_with(".")) {
      if (it->is_directory()) it.disable_recursion_pending();
      ignored.push_back({path.string(), "hidden"});
      continue;
    }
    if (!it->is_regular_file()) continue;
    const std::string extension = lower(path.extension().string());
    if (extension.empty() || extensions.count(extension.substr(1)) == 0) {
      ignored.push_back({path.string(), "not an image (" + (extension.empty() ? "no extension" : extension) + ")"});
      continue;
    }
    std::string key = fs::relative(path, folder).replace_extension().generic_string();
    auto [at, added] = files.emplace(std::move(key), path);
    if (!added) {
      throw std::runtime_error("segmentation folder: " + at->second.string() + " and " + path.string() +
                               " share the name " + at->first + "; an image and its mask are matched by name, "
                               "so each name may appear once in " + folder.string());
    }
  }
  return files;
}

std::string some(const std::vector<std::string>& names) {
  std::string text;
  for (std::size_t i = 0; i < names.size() && i < 5; ++i) text += (i > 0 ? ", " : "") + names[i];
  if (names.size() > 5) text += ", ...";
  return text;
}

}  // namespace

SegmentationFolder::SegmentationFolder(fs::path root, SegmentationFolderOptions options) : root_(std::move(root)) {
  const fs::path images = root_ / options.images;
  const fs::path masks = root_ / options.masks;
  for (const auto& [folder, what] : {std::pair{images, "images"}, std::pair{masks, "masks"}}) {
    if (!fs::is_directory(folder)) {
      throw std::runtime_error("segmentation folder: " + folder.string() + " is not a folder; put the " + what +
                               " there (or name the folder with SegmentationFolderOptions::" +
                               (std::string(what) == "images" ? "images" : "masks") + ")");
    }
  }
  std::set<std::string> extensions;
  for (const std::string& e : options.extensions) extensions.insert(lower(e));
  const auto image_files = list(images, extensions, ignored_);
  const auto mask_files = list(masks, extensions, ignored_);
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
    std::string message = "segmentation folder " + root_.string() + ": images and masks do not match:";
    if (!no_mask.empty()) message += " " + std::to_string(no_mask.size()) + " images without a mask (" + some(no_mask) + ")";
    if (!no_image.empty()) {
      message += std::string(no_mask.empty() ? "" : ";") + " " + std::to_string(no_image.size()) +
                 " masks without an image (" + some(no_image) + ")";
    }
    throw std::runtime_error(message + "; add the missing files, or set allow_unmatched to leave them out");
  }
  if (items_.empty()) {
    throw std::runtime_error("segmentation folder " + root_.string() + ": no image with a mask in " + images.string() +
                             " and " + masks.string());
  }
}

int SegmentationFolder::label(std::size_t i) const {
  (void)items_.at(i);
  return -1;
}

std::string SegmentationFolder::name(std::size_t i) const { return items_.at(i).image.string(); }

const fs::path& SegmentationFolder::image_path(std::size_t i) const { return items_.at(i).image; }
const fs::path& SegmentationFolder::mask_path(std::size_t i) const { return items_.at(i).mask; }

Sample SegmentationFolder::read(std::size_t i) const {
  const Item& item = items_.at(i);
  Sample sample;
  sample.bytes = Bytes(read_file(item.image.string()));
  sample.mask = Bytes(read_file(item.mask.string()));
  sample.mask_name = item.mask.string();
  sample.index = i;
  sample.label = -1;
  sample.name = item.image.string();
  return sample;
}

}  // namespace stoke::nodes
