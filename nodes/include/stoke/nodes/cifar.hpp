// CIFAR-10 and CIFAR-100 in their binary form (https://www.cs.toronto.edu/~kriz/cifar.html):
//
//   CIFAR-10:  records of 3073 bytes: <label> <1024 R> <1024 G> <1024 B>
//              cifar-10-batches-bin/data_batch_1.bin .. data_batch_5.bin, test_batch.bin
//   CIFAR-100: records of 3074 bytes: <coarse label> <fine label> <1024 R> <1024 G> <1024 B>
//              cifar-100-binary/train.bin, test.bin, fine_label_names.txt, coarse_label_names.txt
//
// Each colour plane is 32 x 32, row-major. The files are memory-mapped; read() converts one
// record to interleaved RGB.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "stoke/nodes/dataset.hpp"

namespace stoke::nodes {

namespace detail {
class MappedFile;
}

enum class CifarKind : std::uint8_t { cifar10, cifar100 };
/// Which of CIFAR-100's two labels a sample carries (CIFAR-10 has only the one).
enum class CifarLabels : std::uint8_t { fine, coarse };
enum class CifarSplit : std::uint8_t { train, test };

struct CifarOptions {
  CifarKind kind = CifarKind::cifar10;
  CifarLabels labels = CifarLabels::fine;
};

/// One or more CIFAR batch files read as one dataset: item indices run through the files in the
/// order given (file 0's records, then file 1's, ...).
///
/// Every file is checked at construction: its size must be a whole number of records and every
/// record's label(s) must be in range (< 10 for CIFAR-10; < 100 fine and < 20 coarse for
/// CIFAR-100); the labels are kept in memory, so label() reads no file.
///
/// Class names: CIFAR-10's ten are built in. CIFAR-100's come from fine_label_names.txt (or
/// coarse_label_names.txt) in the first file's folder, one per line, when it is there; otherwise
/// they are "0".."99" ("0".."19").
///
/// Thread-safety: immutable after construction; read() may be called from any number of threads.
/// The mappings live as long as the dataset.
class CifarDataset final : public Dataset {
 public:
  static constexpr int side = 32;                          ///< width and height of every image
  static constexpr std::size_t pixel_bytes = 3 * 32 * 32;  ///< 3072

  /// Maps `files`. Throws std::runtime_error naming the file: cannot be opened; is empty; is not a
  /// whole number of records ("data_batch_1.bin: 9999 whole records then 1500 stray bytes (a
  /// CIFAR-10 record is 3073 bytes): the file is truncated or not CIFAR-10"); has a label out of
  /// range (naming the record); or a names file with the wrong number of names. Throws
  /// std::invalid_argument for no files, or coarse labels asked of CIFAR-10.
  explicit CifarDataset(std::vector<std::filesystem::path> files, CifarOptions options = {});
  ~CifarDataset() override;

  /// Opens the `split` of the CIFAR folder `dir` (the folder of the batch files, or one that holds
  /// cifar-10-batches-bin/ or cifar-100-binary/), detecting which CIFAR it is:
  ///   train: data_batch_*.bin (CIFAR-10, numeric order) or train.bin (CIFAR-100)
  ///   test:  test_batch.bin (CIFAR-10) or test.bin (CIFAR-100)
  /// `labels` applies to CIFAR-100 and is ignored for CIFAR-10. Throws std::runtime_error naming
  /// `dir` and the files looked for when none is there.
  static std::shared_ptr<const CifarDataset> open(const std::filesystem::path& dir, CifarSplit split,
                                                  CifarLabels labels = CifarLabels::fine);

  std::size_t size() const noexcept override { return labels_.size(); }
  int label(std::size_t i) const override;
  /// "<file>#<record>", e.g. ".../data_batch_2.bin#17".
  std::string name(std::size_t i) const override;
  /// The record's pixels as Encoding::raw_rgb, 32 x 32, HWC interleaved RGB (3072 owned bytes).
  Sample read(std::size_t i) const override;
  const std::vector<std::string>& classes() const noexcept override { return classes_; }

  CifarKind kind() const noexcept { return options_.kind; }
  /// Bytes per record: 3073 (CIFAR-10) or 3074 (CIFAR-100).
  std::size_t record_size() const noexcept;

 private:
  struct File {
    std::shared_ptr<const detail::MappedFile> map;
    std::size_t first;  // index of its first record in the dataset
    std::size_t records;
  };
  /// The file holding item i (i < size()).
  const File& file_of(std::size_t i) const;

  CifarOptions options_;
  std::vector<File> files_;
  std::vector<std::uint8_t> labels_;
  std::vector<std::string> classes_;
};

}  // namespace stoke::nodes
