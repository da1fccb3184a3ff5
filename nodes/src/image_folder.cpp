#include "stoke/nodes/image_folder.hpp"

#include <algorithm>
#include <cctype>
#include <set>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "dataset_support.hpp"

namespace stoke::nodes {

namespace fs = std::filesystem;

const std::vector<std::string>& default_image_extensions() {
  static const std::vector<std::string> extensions{"jpg", "jpeg", "png", "bmp", "gif", "webp",
                                                   "tif", "tiff", "ppm", "pgm", "pbm"};
  return extensions;
}

namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

bool hidden(const fs::path& path) {
  const std::string name = path.filename().string();
  return !name.empty() && name.front() == '.';
}

std::string quoted(const fs::path& path) { return "'" + path.string() + "'"; }

[[noreturn]] void cannot_list(const fs::path& dir, const std::error_code& error) {
  throw std::runtime_error("ImageFolder: cannot list " + quoted(dir) + ": " + error.message() +
                           " (check that the folder is readable)");
}

/// The entries of `dir`, sorted by name (byte order).
std::vector<fs::directory_entry> sorted_entries(const fs::path& dir) {
  std::error_code error;
  fs::directory_iterator it(dir, error);
  if (error) cannot_list(dir, error);
  std::vector<fs::directory_entry> entries;
  for (const fs::directory_iterator end; it != end; it.increment(error)) {
    if (error) cannot_list(dir, error);
    entries.push_back(*it);
  }
  if (error) cannot_list(dir, error);
  std::sort(entries.begin(), entries.end(), [](const fs::directory_entry& a, const fs::directory_entry& b) {
    return a.path().filename().native() < b.path().filename().native();
  });
  return entries;
}

/// Walks one class folder (and the folders inside it, following links), sorting files into
/// images and ignored ones.
class ClassWalker {
 public:
  ClassWalker(const std::set<std::string>& extensions, std::vector<IgnoredFile>& ignored)
      : extensions_(extensions), ignored_(ignored) {}

  /// Appends the images under `dir` to `images`.
  void walk(const fs::path& dir, std::vector<fs::path>& images) {
    std::error_code error;
    const fs::path real = fs::canonical(dir, error);
    if (error) cannot_list(dir, error);
    // A link back to a folder on the current path would be walked forever.
    if (!ancestors_.insert(real.native()).second) {
      ignored_.push_back({dir.string(), "symbolic link to a folder that contains it (not followed)"});
      return;
    }
    for (const fs::directory_entry& entry : sorted_entries(dir)) {
      const fs::path& path = entry.path();
      if (hidden(path)) {
        ignored_.push_back({path.string(), "hidden (name starts with '.')"});
        continue;
      }
      const fs::file_status status = entry.status(error);  // follows symbolic links
      if (error && status.type() != fs::file_type::not_found) {
        ignored_.push_back({path.string(), "cannot stat: " + error.message()});
        continue;
      }
      switch (status.type()) {
        case fs::file_type::directory:
          walk(path, images);
          break;
        case fs::file_type::regular:
          classify(path, images);
          break;
        case fs::file_type::not_found:
          ignored_.push_back({path.string(), "broken symbolic link"});
          break;
        default:
          ignored_.push_back({path.string(), "not a regular file"});
          break;
      }
    }
    ancestors_.erase(real.native());
  }

 private:
  void classify(const fs::path& path, std::vector<fs::path>& images) {
    const std::string extension = lower(path.extension().string());
    if (extension.empty()) {
      ignored_.push_back({path.string(), "not an image (no extension)"});
    } else if (extensions_.count(extension.substr(1)) == 0) {
      ignored_.push_back({path.string(), "not an image (" + extension + ")"});
    } else {
      images.push_back(path);
    }
  }

  const std::set<std::string>& extensions_;
  std::vector<IgnoredFile>& ignored_;
  std::set<std::string> ancestors_;
};

std::string join(const std::set<std::string>& words) {
  std::string text;
  for (const std::string& word : words) text += (text.empty() ? "" : " ") + word;
  return text;
}

}  // namespace

ImageFolder::ImageFolder(fs::path root, ImageFolderOptions options) : root_(std::move(root)) {
  std::set<std::string> extensions;
  for (const std::string& extension : options.extensions) {
    std::string normal = lower(extension);
    if (!normal.empty() && normal.front() == '.') normal.erase(0, 1);
    if (normal.empty()) throw std::invalid_argument("ImageFolder: an empty image extension was given");
    extensions.insert(std::move(normal));
  }
  if (extensions.empty()) throw std::invalid_argument("ImageFolder: no image extensions were given");

  std::error_code error;
  const fs::file_status status = fs::status(root_, error);
  if (status.type() == fs::file_type::not_found) {
    throw std::runtime_error("ImageFolder: " + quoted(root_) +
                             " does not exist: pass the folder that holds one subfolder per class (" +
                             (root_ / "<class>" / "<image>").string() + ")");
  }
  if (error) cannot_list(root_, error);
  if (status.type() != fs::file_type::directory) {
    throw std::runtime_error("ImageFolder: " + quoted(root_) +
                             " is not a folder: pass the folder that holds one subfolder per class "
                             "(a text file of 'path,label' lines is read by FileList)");
  }

  std::vector<fs::path> class_dirs;
  std::size_t loose_images = 0;
  for (const fs::directory_entry& entry : sorted_entries(root_)) {
    const fs::path& path = entry.path();
    if (hidden(path)) {
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
    const std::string extension = lower(path.extension().string());
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

  ClassWalker walker(extensions, ignored_);
  for (std::size_t label = 0; label < class_dirs.size(); ++label) {
    std::vector<fs::path> images;
    walker.walk(class_dirs[label], images);
    if (images.empty() && !options.allow_empty_classes) {
      throw std::runtime_error("ImageFolder: class folder " + quoted(class_dirs[label]) +
                               " has no images (extensions: " + join(extensions) +
                               "): add images, remove the folder, or set allow_empty_classes");
    }
    // torchvision's order: sorted(os.walk(...)) visits folders in path order, files by name.
    std::sort(images.begin(), images.end(), [](const fs::path& a, const fs::path& b) {
      // Folders compare as strings, not by components: "cat/a-b" < "cat/a/b" as in Python.
      const fs::path a_dir = a.parent_path(), b_dir = b.parent_path();
      if (a_dir.native() != b_dir.native()) return a_dir.native() < b_dir.native();
      return a.filename().native() < b.filename().native();
    });
    for (fs::path& image : images) items_.push_back({std::move(image), static_cast<int>(label)});
    classes_.push_back(class_dirs[label].filename().string());
  }
}

const fs::path& ImageFolder::path(std::size_t i) const {
  if (i >= items_.size()) detail::item_out_of_range("ImageFolder " + quoted(root_), i, items_.size());
  return items_[i].path;
}

int ImageFolder::label(std::size_t i) const {
  if (i >= items_.size()) detail::item_out_of_range("ImageFolder " + quoted(root_), i, items_.size());
  return items_[i].label;
}

std::string ImageFolder::name(std::size_t i) const { return path(i).string(); }

Sample ImageFolder::read(std::size_t i) const { return detail::read_file_sample(path(i), items_[i].label, i); }

}  // namespace stoke::nodes
