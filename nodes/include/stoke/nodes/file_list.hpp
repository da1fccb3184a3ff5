// FileList: a dataset described by a text (CSV) file: `path,label` lines, or, after a header that
// names them, columns for a mask file and named targets.
//
//   # comments and blank lines are skipped
//   path,label                    <- optional header: a first line whose label is not an integer
//   cats/001.jpg,0
//   dogs/with,comma.jpg,1         <- split at the last comma: paths may contain commas
//   "dogs/quoted ""x"".jpg",1     <- a double-quoted path (CSV style) is unquoted
//   /data/elsewhere/7.png,1       <- absolute paths are taken as they are
//
// With columns (any header other than `path,label` that names a `path` or `mask` column, or has
// more than two fields):
//
//   path,label,mask,age,labels    <- path is required; label, mask and targets are optional
//   scans/001.png,2,masks/001.png,63,0 1 1 0
//   "scans/a,b.png",,masks/ab.png,41.5,"1 0 0 0"
//                                 <- fields are CSV: quote one with a comma; "" is a quote
//                                 <- an empty label is -1 (unlabelled); an empty mask is none
//
//   path    the image file, relative to the root (or absolute)
//   label   an integer class in 0..999999, or empty for -1
//   mask    a mask file (Sample::mask, decoded beside the image), relative to the root; may be empty
//   other   a float target of that name (Sample::targets): one number is a scalar (shape {}),
//           space-separated numbers a vector (shape {n}); every row gives the same count
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "stoke/nodes/dataset.hpp"

namespace stoke::nodes {

/// The items of a list file, parsed once at construction, in the file's order.
///
/// Legacy format: one item per line, `path,label`, split at the last comma; the label is a decimal
/// integer in 0..999999 (spaces around it are allowed). Blank lines and lines starting with '#' are
/// skipped, CRLF line ends are accepted, and the first non-comment line is a header when its
/// label field is not an integer. A header of two fields (`path,label`, `file,class`, ...) keeps
/// this format.
///
/// Column format: a header that names a `path` or `mask` column, or has more than two fields
/// (other than exactly `path,label`), names the columns (see the top of this file); names are
/// case-sensitive and each may appear once. Every row then has one CSV field per column (double
/// quotes around a field that holds a comma or a quote, "" for a quote, spaces around fields
/// trimmed). Column names other than path, label and mask are float targets; a target field
/// holds one number (a scalar) or numbers separated by spaces (a vector), the same count on every
/// row as on the first.
///
/// Relative paths (images and masks) are resolved against `root`. Files are not opened until
/// read().
///
/// Memory: the resolved paths (and mask paths) lie back to back in one string, with one 8-byte
/// offset per path and a 4-byte label per item; target values live in one flat array (item i's at
/// i * stride). About 12 bytes per item beyond the path bytes (20 with a mask column).
///
/// Thread-safety: immutable after construction; read() may be called from any number of threads.
class FileList final : public Dataset {
 public:
  /// A target column: its name (Sample::targets' key) and the shape of each item's value.
  struct TargetColumn {
    std::string name;
    std::vector<std::int64_t> shape;  ///< {} for a scalar, {n} for n space-separated values
  };

  /// Parses `list_file`; relative paths are taken relative to `root` (empty: the list file's
  /// folder). Throws std::runtime_error "list.csv:17: label 'x' is not an integer" (and the like:
  /// an unknown or duplicate column, no path column, a wrong field count, a target value that is
  /// not a number or a vector of another length) for a bad line, or naming the list file when it
  /// cannot be read.
  explicit FileList(std::filesystem::path list_file, std::filesystem::path root = {});

  std::size_t size() const noexcept override { return labels_.size(); }
  int label(std::size_t i) const override;
  /// The item's resolved path (root / path, or the absolute path as written).
  std::string name(std::size_t i) const override;
  /// Reads the whole file (owned bytes, Encoding::encoded); with a mask column also the mask file
  /// (Sample::mask, owned; Sample::mask_name its path) and, with target columns, Sample::targets.
  /// Throws std::runtime_error naming the file (image or mask) when it cannot be read.
  Sample read(std::size_t i) const override;
  /// "0", "1", ..., up to the largest label in the list; empty for a list without labels.
  const std::vector<std::string>& classes() const noexcept override { return classes_; }

  const std::filesystem::path& list_file() const noexcept { return list_file_; }
  const std::filesystem::path& root() const noexcept { return root_; }
  /// The item's resolved path.
  std::filesystem::path path(std::size_t i) const;

  /// True when the header names a mask column.
  bool has_masks() const noexcept { return has_masks_; }
  /// The item's resolved mask path; empty when the list has no mask column or the item's field
  /// is empty.
  std::filesystem::path mask_path(std::size_t i) const;
  /// The target columns in header order (empty for a legacy list).
  const std::vector<TargetColumn>& target_columns() const noexcept { return target_columns_; }

 private:
  /// Throws std::out_of_range naming the list unless i < size().
  void check_index(std::size_t i) const;
  /// The path in `names_` at slot s (item i's path is slot i * slots_per_item(), its mask the next).
  std::string_view slot(std::size_t s) const noexcept {
    return std::string_view(names_).substr(ends_[s], ends_[s + 1] - ends_[s]);
  }
  std::size_t slots_per_item() const noexcept { return has_masks_ ? 2 : 1; }

  std::filesystem::path list_file_;
  std::filesystem::path root_;
  std::vector<std::string> classes_;
  bool has_masks_ = false;
  std::string names_;                 ///< the resolved paths (and masks) back to back, no separators
  std::vector<std::uint64_t> ends_;   ///< slot s spans [ends_[s], ends_[s + 1]); ends_[0] = 0
  std::vector<std::int32_t> labels_;  ///< one per item; -1 for none
  std::vector<TargetColumn> target_columns_;
  std::vector<float> target_values_;  ///< item i's values at i * target_stride_, in column order
  std::size_t target_stride_ = 0;
};

}  // namespace stoke::nodes
