// cifar_fuzz: a libFuzzer harness for CIFAR binary batches (cifar.hpp): CifarDataset maps a batch
// file, checks its labels and reads the names file beside it; every record is then read.
//
// Input: a mode byte -- bit 0: CIFAR-100 (else CIFAR-10), bit 1: coarse labels, bit 2: a names
// file follows, bit 3: open the folder with CifarDataset::open (else the file by path) -- then,
// with bit 2, a u16 (little-endian) length n and n bytes of fine_label_names.txt (or
// coarse_label_names.txt), then the batch file.
//
// Any outcome but a dataset or the documented errors (std::runtime_error, std::invalid_argument
// for coarse labels of CIFAR-10) -- a crash, a sanitizer report, another exception, a hang -- is
// a bug; so is a label outside classes() or a record whose pixels are not the input's.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>

#include "fuzz_files.hpp"
#include "stoke/nodes/cifar.hpp"

namespace {

using stoke::nodes::CifarDataset;

void read_all(const CifarDataset& dataset, std::span<const std::uint8_t> batch) {
  const std::size_t record = dataset.record_size();
  for (std::size_t i = 0; i < dataset.size(); ++i) {
    const int label = dataset.label(i);
    if (label < 0 || static_cast<std::size_t>(label) >= dataset.classes().size()) std::abort();
    (void)dataset.name(i);
    const stoke::nodes::Sample sample = dataset.read(i);
    if (sample.bytes.size() != CifarDataset::pixel_bytes || sample.width != 32 || sample.height != 32) std::abort();
    // Planar R, G, B in the record; interleaved in the sample.
    const std::uint8_t* planes = batch.data() + i * record + record - CifarDataset::pixel_bytes;
    const auto* rgb = reinterpret_cast<const std::uint8_t*>(sample.bytes.data());
    for (std::size_t p = 0; p < 1024; ++p) {
      if (rgb[3 * p] != planes[p] || rgb[3 * p + 1] != planes[1024 + p] || rgb[3 * p + 2] != planes[2048 + p]) {
        std::abort();
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  using stoke::nodes::CifarKind;
  using stoke::nodes::CifarLabels;
  static const fs::path dir = stoke::fuzz::scratch_dir();
  if (size < 1) return 0;
  const std::uint8_t mode = data[0];
  const CifarKind kind = (mode & 1) != 0 ? CifarKind::cifar100 : CifarKind::cifar10;
  const CifarLabels labels = (mode & 2) != 0 ? CifarLabels::coarse : CifarLabels::fine;
  std::span<const std::uint8_t> rest(data + 1, size - 1);

  std::error_code error;
  for (const char* name : {"fine_label_names.txt", "coarse_label_names.txt", "data_batch_1.bin", "train.bin"}) {
    fs::remove(dir / name, error);
  }
  if ((mode & 4) != 0) {
    if (rest.size() < 2) return 0;
    const std::size_t n = std::min<std::size_t>(rest[0] | rest[1] << 8, rest.size() - 2);
    const fs::path names = dir / (labels == CifarLabels::coarse ? "coarse_label_names.txt" : "fine_label_names.txt");
    stoke::fuzz::write_file(names, rest.subspan(2, n));
    rest = rest.subspan(2 + n);
  }
  const fs::path batch = dir / (kind == CifarKind::cifar10 ? "data_batch_1.bin" : "train.bin");
  stoke::fuzz::write_file(batch, rest);

  try {
    if ((mode & 8) != 0) {
      const std::shared_ptr<const CifarDataset> dataset =
          CifarDataset::open(dir, stoke::nodes::CifarSplit::train, labels);
      read_all(*dataset, rest);
    } else {
      const CifarDataset dataset({batch}, {.kind = kind, .labels = labels});
      read_all(dataset, rest);
    }
  } catch (const std::runtime_error&) {
  } catch (const std::invalid_argument&) {
    if (kind != CifarKind::cifar10 || labels != CifarLabels::coarse || (mode & 8) != 0) throw;
  }
  return 0;
}
