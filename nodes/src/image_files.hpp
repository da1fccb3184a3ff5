// Listing image files under a folder, for the folder datasets (ImageFolder, SegmentationFolder;
// private to stoke::nodes): sorted entries, hidden ones skipped, symbolic links followed but a
// link back into the folder being walked refused, files taken by extension (or, when asked, DICOM
// files recognised by their first 132 bytes), and everything left out reported as IgnoredFile.
#pragma once

#include <filesystem>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "stoke/nodes/dataset.hpp"

namespace stoke::nodes::detail {

std::string lower_ascii(std::string text);

/// A name starting with '.' (".DS_Store", ".ipynb_checkpoints").
bool is_hidden(const std::filesystem::path& path);

/// `extensions` lower-cased and without a leading dot. Throws std::invalid_argument naming `who`
/// when one is empty or none is given.
std::set<std::string> extension_set(const std::vector<std::string>& extensions, std::string_view who);

/// The entries of `dir`, sorted by name (byte order). Throws std::runtime_error "<who>: cannot
/// list <dir>: <why> (check that the folder is readable)".
std::vector<std::filesystem::directory_entry> sorted_entries(const std::filesystem::path& dir, std::string_view who);

/// True when `path` is DICOM Part 10 ("DICM" after the 128-byte preamble); reads its first 132
/// bytes only. Otherwise false, with `why` saying why not (no "DICM" at byte 128, too short,
/// or why it cannot be read).
bool is_dicom_file(const std::filesystem::path& path, std::string& why);

/// Walks folders (and the folders inside them, following links), sorting files into images (by
/// extension) and ignored ones. With `probe_extensionless_dicom`, a file whose name has no
/// extension, or an all-digit one (scanners name files "IM0001" or by UID, "1.2.840.113619.2.55"),
/// is read (132 bytes) and taken when it is DICOM.
class ImageWalker {
 public:
  ImageWalker(std::set<std::string> extensions, std::vector<IgnoredFile>& ignored, std::string who,
              bool probe_extensionless_dicom = false)
      : extensions_(std::move(extensions)),
        ignored_(ignored),
        who_(std::move(who)),
        probe_extensionless_dicom_(probe_extensionless_dicom) {}

  /// Appends the images under `dir` to `images`, in directory-walk order (each folder's entries
  /// by name).
  void walk(const std::filesystem::path& dir, std::vector<std::filesystem::path>& images);

  const std::set<std::string>& extensions() const noexcept { return extensions_; }

 private:
  void classify(const std::filesystem::path& path, std::vector<std::filesystem::path>& images);

  std::set<std::string> extensions_;
  std::vector<IgnoredFile>& ignored_;
  std::string who_;
  bool probe_extensionless_dicom_;
  std::set<std::string> ancestors_;
};

}  // namespace stoke::nodes::detail
