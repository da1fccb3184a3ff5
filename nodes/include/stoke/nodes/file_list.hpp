// FileList: a dataset described by a text (CSV) file of `path,label` lines.
//
//   # comments and blank lines are skipped
//   path,label                    <- optional header: a first line whose label is not an integer
//   cats/001.jpg,0
//   dogs/with,comma.jpg,1         <- split at the last comma: paths may contain commas
//   "dogs/quoted ""x"".jpg",1     <- a double-quoted path (CSV style) is unquoted
//   /data/elsewhere/7.png,1       <- absolute paths are taken as they are
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "stoke/nodes/dataset.hpp"

namespace stoke::nodes {

/// The items of a list file, parsed once at construction, in the file's order.
///
/// Format: one item per line, `path,label`, split at the last comma; the label is a decimal
/// integer in 0..999999 (spaces around it are allowed). Blank lines and lines starting with '#' are
/// skipped, CRLF line ends are accepted, and the first non-comment line is a header when its
/// label field is not an integer. Relative paths are resolved against `root`. Files are not
/// opened until read().
///
/// Thread-safety: immutable after construction; read() may be called from any number of threads.
class FileList final : public Dataset {
 public:
  /// Parses `list_file`; relative paths are taken relative to `root` (empty: the list file's
  /// folder). Throws std::runtime_error "list.csv:17: label 'x' is not an integer" (and the like)
  /// for a bad line, or naming the list file when it cannot be read.
  explicit FileList(std::filesystem::path list_file, std::filesystem::path root = {});

  std::size_t size() const noexcept override { return items_.size(); }
  int label(std::size_t i) const override;
  /// The item's resolved path (root / path, or the absolute path as written).
  std::string name(std::size_t i) const override;
  /// Reads the whole file (owned bytes, Encoding::encoded). Throws std::runtime_error naming the
  /// file when it cannot be read.
  Sample read(std::size_t i) const override;
  /// "0", "1", ..., up to the largest label in the list; empty for an empty list.
  const std::vector<std::string>& classes() const noexcept override { return classes_; }

  const std::filesystem::path& list_file() const noexcept { return list_file_; }
  const std::filesystem::path& root() const noexcept { return root_; }
  /// The item's resolved path.
  const std::filesystem::path& path(std::size_t i) const;

 private:
  struct Item {
    std::filesystem::path path;
    int label;
  };

  std::filesystem::path list_file_;
  std::filesystem::path root_;
  std::vector<std::string> classes_;
  std::vector<Item> items_;
};

}  // namespace stoke::nodes
