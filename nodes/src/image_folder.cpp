#include "stoke/nodes/image_folder.hpp"

#include <algorithm>
#include <cctype>
#include <set>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "dataset_support.hpp"
#include "image_files.hpp"

namespace stoke::nodes {

namespace fs = std::filesystem;

const std::vector<std::string>& default_image_extensions() {
  static const std::vector<std::string> extensions{"jpg",  "jpeg", "png", "bmp", "gif", "webp", "tif",
                                                   "tiff", "ppm",  "pgm", "pbm", "dcm", "dicom"};
  return extensions;
}

namespace {

using detail::is_hidden;
using detail::sorted_entries;

std::string quoted(const fs::path& path) { return "'" + path.string() + "'"; }

std::string join(const std::set<std::string>& words) {
  std::string text;
  for (const std::string& word : words) text += (text.empty() ? "" : " ") + word;
  return text;
}

}  // namespace

ImageFolder::ImageFolder(fs::path root, ImageFolderOptions options) : root_(std::move(root)) {
  const std::set<std::string> extensions = detail::extension_set(options.extensions, "ImageFolder");

  std::error_code error;
  const fs::file_status status = fs::status(root_, error);
  if (status.type() == fs::file_type::not_found) {
    throw std::runtime_error("ImageFolder: " + quoted(root_) +
                             " does not exist: pass the folder that holds one subfolder per class (" +
                             (root_ / "<class>" / "<image>").string() + ")");
  }
  if (error) {
    throw std::runtime_error("ImageFolder: cannot list " + quoted(root_) + ": " + error.message() +
                             " (check that the folder is readable)");
  }
  if (status.type() != fs::file_type::directory) {
    throw std::runtime_error("ImageFolder: " + quoted(root_) +
                             " is not a folder: pass the folder that holds one subfolder per class "
                             "(a text file of 'path,label' lines is read by FileList)");
  }

  std::vector<fs::path> class_dirs;
  std::size_t loose_images = 0;
  for (const fs::directory_entry& entry : sorted_entries(root_, "ImageFolder")) {
    const fs::path& path = entry.path();
    if (is_hidden(path)) {
      ignored_.push_back({path.string(), "hidden (name starts with '.')"});
      continue;
    }
    const fs::file_status entry_status = entry.status(error);
    if (entry_status.type() == fs::file_type::directory) {
      class_dirs.push_back(path);
      continue;
    }
    if (entry_status.type() == fs::file_type::not_found) {
      ignored_.push_back({path.string(), "broken symbolic link"});
      continue;
    }
    const std::string extension = detail::lower_ascii(path.extension().string());
    if (!extension.empty() && extensions.count(extension.substr(1)) != 0) ++loose_images;
    ignored_.push_back({path.string(), "not in a class folder (images go in root/<class>/)"});
  }
  if (class_dirs.empty()) {
    std::string message = "ImageFolder: " + quoted(root_) +
                          " has no class folders: put each class's images in a subfolder of it, e.g. " +
                          (root_ / "cat" / "1.jpg").string() + " and " + (root_ / "dog" / "2.jpg").string();
    if (loose_images > 0) {
      message += " (" + std::to_string(loose_images) + " images lie directly in the root, outside any class folder)";
    }
    throw std::runtime_error(message);
  }

  detail::ImageWalker walker(extensions, ignored_, "ImageFolder", options.probe_extensionless_dicom);
  for (std::size_t label = 0; label < class_dirs.size(); ++label) {
    std::vector<fs::path> images;
    walker.walk(class_dirs[label], images);
    if (images.empty() && !options.allow_empty_classes) {
      throw std::runtime_error("ImageFolder: class folder " + quoted(class_dirs[label]) +
                               " has no images (extensions: " + join(extensions) +
                               (options.probe_extensionless_dicom ? "; and DICOM files without one" : "") +
                               "): add images, remove the folder, or set allow_empty_classes");
    }
    // torchvision's order: sorted(os.walk(...)) visits folders in path order, files by name.
    std::sort(images.begin(), images.end(), [](const fs::path& a, const fs::path& b) {
      // Folders compare as strings, not by components: "cat/a-b" < "cat/a/b" as in Python.
      const fs::path a_dir = a.parent_path(), b_dir = b.parent_path();
      if (a_dir.native() != b_dir.native()) return a_dir.native() < b_dir.native();
      return a.filename().native() < b.filename().native();
    });
    for (const fs::path& image : images) {
      names_ += image.native();
      ends_.push_back(names_.size());
    }
    class_ends_.push_back(size());
    classes_.push_back(class_dirs[label].filename().string());
  }
  names_.shrink_to_fit();
  ends_.shrink_to_fit();
}

void ImageFolder::check_index(std::size_t i) const {
  if (i >= size()) detail::item_out_of_range("ImageFolder " + quoted(root_), i, size());
}

fs::path ImageFolder::path(std::size_t i) const {
  check_index(i);
  return fs::path(name_view(i));
}

int ImageFolder::label(std::size_t i) const {
  check_index(i);
  // The first class whose items end after i (an empty class ends where it begins).
  return static_cast<int>(std::upper_bound(class_ends_.begin(), class_ends_.end(), i) - class_ends_.begin());
}

std::string ImageFolder::name(std::size_t i) const {
  check_index(i);
  return std::string(name_view(i));
}

Sample ImageFolder::read(std::size_t i) const { return detail::read_file_sample(path(i), label(i), i); }

}  // namespace stoke::nodes
