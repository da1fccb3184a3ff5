#include "image_files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "stoke/nodes/decode.hpp"

namespace stoke::nodes::detail {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void cannot_list(std::string_view who, const fs::path& dir, const std::error_code& error) {
  throw std::runtime_error(std::string(who) + ": cannot list '" + dir.string() + "': " + error.message() +
                           " (check that the folder is readable)");
}

// A name scanners give instead of an extension: "IM0001" (none) or a UID, "1.2.840.113619.2.55"
// (an all-digit one).
bool scanner_style(const std::string& extension) {
  return extension.empty() || (extension.size() > 1 && std::all_of(extension.begin() + 1, extension.end(),
                                                                   [](char c) { return c >= '0' && c <= '9'; }));
}

}  // namespace

bool is_dicom_file(const fs::path& path, std::string& why) {
  constexpr std::size_t preamble = 132;  // 128 bytes, then "DICM"
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    why = std::string("cannot open: ") + std::strerror(errno);
    return false;
  }
  std::array<std::byte, preamble> bytes{};
  std::size_t done = 0;
  int error = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = errno;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (error != 0) {
    why = std::string("cannot read: ") + std::strerror(error);
    return false;
  }
  if (done < bytes.size()) {
    why = std::to_string(done) + " bytes, shorter than DICOM's 128-byte preamble and \"DICM\"";
    return false;
  }
  if (detect_format(bytes) != ImageFormat::dicom) {
    why = "no \"DICM\" at byte 128";
    return false;
  }
  return true;
}

std::string lower_ascii(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

bool is_hidden(const fs::path& path) {
  const std::string name = path.filename().string();
  return !name.empty() && name.front() == '.';
}

std::set<std::string> extension_set(const std::vector<std::string>& extensions, std::string_view who) {
  std::set<std::string> set;
  for (const std::string& extension : extensions) {
    std::string normal = lower_ascii(extension);
    if (!normal.empty() && normal.front() == '.') normal.erase(0, 1);
    if (normal.empty()) throw std::invalid_argument(std::string(who) + ": an empty image extension was given");
    set.insert(std::move(normal));
  }
  if (set.empty()) throw std::invalid_argument(std::string(who) + ": no image extensions were given");
  return set;
}

std::vector<fs::directory_entry> sorted_entries(const fs::path& dir, std::string_view who) {
  std::error_code error;
  fs::directory_iterator it(dir, error);
  if (error) cannot_list(who, dir, error);
  std::vector<fs::directory_entry> entries;
  for (const fs::directory_iterator end; it != end; it.increment(error)) {
    if (error) cannot_list(who, dir, error);
    entries.push_back(*it);
  }
  if (error) cannot_list(who, dir, error);
  std::sort(entries.begin(), entries.end(), [](const fs::directory_entry& a, const fs::directory_entry& b) {
    return a.path().filename().native() < b.path().filename().native();
  });
  return entries;
}

void ImageWalker::walk(const fs::path& dir, std::vector<fs::path>& images) {
  std::error_code error;
  const fs::path real = fs::canonical(dir, error);
  if (error) cannot_list(who_, dir, error);
  // A link back to a folder on the current path would be walked forever.
  if (!ancestors_.insert(real.native()).second) {
    ignored_.push_back({dir.string(), "symbolic link to a folder that contains it (not followed)"});
    return;
  }
  for (const fs::directory_entry& entry : sorted_entries(dir, who_)) {
    const fs::path& path = entry.path();
    if (is_hidden(path)) {
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

void ImageWalker::classify(const fs::path& path, std::vector<fs::path>& images) {
  const std::string extension = lower_ascii(path.extension().string());
  if (probe_extensionless_dicom_ && scanner_style(extension) &&
      (extension.empty() || extensions_.count(extension.substr(1)) == 0)) {
    std::string why;
    if (is_dicom_file(path, why)) {
      images.push_back(path);
    } else {
      ignored_.push_back({path.string(), "not an image (" + (extension.empty() ? "no extension" : extension) +
                                             ") and not DICOM: " + why});
    }
  } else if (extension.empty()) {
    ignored_.push_back({path.string(), "not an image (no extension)"});
  } else if (extensions_.count(extension.substr(1)) == 0) {
    ignored_.push_back({path.string(), "not an image (" + extension + ")"});
  } else {
    images.push_back(path);
  }
}

}  // namespace stoke::nodes::detail
