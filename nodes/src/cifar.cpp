#include "stoke/nodes/cifar.hpp"

#include <algorithm>
#include <charconv>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <utility>

#include "dataset_support.hpp"
#include "mapped_file.hpp"

namespace stoke::nodes {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t plane = 32 * 32;

const char* kind_name(CifarKind kind) { return kind == CifarKind::cifar10 ? "CIFAR-10" : "CIFAR-100"; }

/// Names from a text file, one per line (blank lines skipped), or "0".."count-1" when there is no
/// such file.
std::vector<std::string> class_names(const fs::path& file, std::size_t count) {
  std::vector<std::string> names;
  std::error_code error;
  if (fs::is_regular_file(file, error)) {
    const std::vector<std::byte> bytes = read_file(file.string());
    const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    for (std::size_t begin = 0; begin < text.size();) {
      auto end = text.find('\n', begin);
      if (end == std::string_view::npos) end = text.size();
      std::string_view line = text.substr(begin, end - begin);
      begin = end + 1;
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
      while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
      if (!line.empty()) names.emplace_back(line);
    }
    if (names.size() != count) {
      throw std::runtime_error(file.string() + ": " + std::to_string(names.size()) + " class names, expected " +
                               std::to_string(count) + " (one per line): remove or repair the file");
    }
    return names;
  }
  for (std::size_t label = 0; label < count; ++label) names.push_back(std::to_string(label));
  return names;
}

/// The number in "data_batch_<n>.bin", for numeric order (data_batch_10 after data_batch_9).
unsigned batch_number(const fs::path& file) {
  const std::string stem = file.stem().string();  // data_batch_<n>
  unsigned number = 0;
  const char* begin = stem.data() + std::string_view("data_batch_").size();
  std::from_chars(begin, stem.data() + stem.size(), number);
  return number;
}

bool is_file(const fs::path& path) {
  std::error_code error;
  return fs::is_regular_file(path, error);
}

}  // namespace

CifarDataset::CifarDataset(std::vector<fs::path> files, CifarOptions options) : options_(options) {
  if (files.empty()) throw std::invalid_argument("CifarDataset: no files given");
  const bool cifar10 = options_.kind == CifarKind::cifar10;
  if (cifar10 && options_.labels == CifarLabels::coarse) {
    throw std::invalid_argument("CifarDataset: coarse labels exist only in CIFAR-100");
  }
  const std::size_t record = record_size();
  const std::size_t label_offset = cifar10 || options_.labels == CifarLabels::coarse ? 0 : 1;

  std::size_t first = 0;
  for (const fs::path& path : files) {
    auto map = std::make_shared<const detail::MappedFile>(path);
    if (map->size() == 0) {
      throw std::runtime_error(path.string() + ": the file is empty: not a " + kind_name(options_.kind) + " batch");
    }
    const std::size_t records = map->size() / record;
    const std::size_t stray = map->size() % record;
    if (stray != 0) {
      throw std::runtime_error(path.string() + ": " + std::to_string(records) + " whole records then " +
                               std::to_string(stray) + " stray bytes (a " + kind_name(options_.kind) + " record is " +
                               std::to_string(record) + " bytes): the file is truncated or not " +
                               kind_name(options_.kind));
    }
    // Every label is checked now, so that read() and label() never meet a bad one.
    map->advise_sequential();
    const std::byte* data = map->bytes().data();
    labels_.reserve(labels_.size() + records);
    for (std::size_t r = 0; r < records; ++r) {
      const std::byte* at = data + r * record;
      const auto first_label = static_cast<unsigned>(at[0]);
      if (cifar10) {
        if (first_label >= 10) {
          throw std::runtime_error(path.string() + ": record " + std::to_string(r) + " has label " +
                                   std::to_string(first_label) +
                                   " (CIFAR-10 labels are 0..9): the file is corrupt or not CIFAR-10");
        }
      } else {
        const auto fine = static_cast<unsigned>(at[1]);
        if (first_label >= 20 || fine >= 100) {
          throw std::runtime_error(path.string() + ": record " + std::to_string(r) + " has coarse label " +
                                   std::to_string(first_label) + " and fine label " + std::to_string(fine) +
                                   " (CIFAR-100 labels are 0..19 and 0..99): the file is corrupt or not CIFAR-100");
        }
      }
      labels_.push_back(static_cast<std::uint8_t>(at[label_offset]));
    }
    map->advise_random();
    files_.push_back({std::move(map), first, records});
    first += records;
  }

  const fs::path folder = files.front().parent_path();
  if (cifar10) {
    classes_ = {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
  } else if (options_.labels == CifarLabels::fine) {
    classes_ = class_names(folder / "fine_label_names.txt", 100);
  } else {
    classes_ = class_names(folder / "coarse_label_names.txt", 20);
  }
}

CifarDataset::~CifarDataset() = default;

std::shared_ptr<const CifarDataset> CifarDataset::open(const fs::path& dir, CifarSplit split, CifarLabels labels) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    throw std::runtime_error(
        "CIFAR: '" + dir.string() +
        "' is not a folder: pass the folder of the binary batches "
        "(cifar-10-batches-bin or cifar-100-binary, from https://www.cs.toronto.edu/~kriz/cifar.html)");
  }
  // Accept the folder the archives were unpacked into as well as the batch folder itself.
  const auto has_batches = [](const fs::path& folder) {
    return is_file(folder / "data_batch_1.bin") || is_file(folder / "test_batch.bin") ||
           is_file(folder / "train.bin") || is_file(folder / "test.bin");
  };
  fs::path folder = dir;
  if (!has_batches(dir)) {
    for (const char* sub : {"cifar-10-batches-bin", "cifar-100-binary"}) {
      if (has_batches(dir / sub)) {
        folder = dir / sub;
        break;
      }
    }
  }

  std::vector<fs::path> cifar10_files;
  if (split == CifarSplit::train) {
    for (const fs::directory_entry& entry : fs::directory_iterator(folder, error)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with("data_batch_") && name.ends_with(".bin") && is_file(entry.path()))
        cifar10_files.push_back(entry.path());
    }
    std::sort(cifar10_files.begin(), cifar10_files.end(),
              [](const fs::path& a, const fs::path& b) { return batch_number(a) < batch_number(b); });
  } else if (is_file(folder / "test_batch.bin")) {
    cifar10_files.push_back(folder / "test_batch.bin");
  }
  if (!cifar10_files.empty()) {
    return std::make_shared<const CifarDataset>(std::move(cifar10_files), CifarOptions{CifarKind::cifar10});
  }
  const fs::path cifar100_file = folder / (split == CifarSplit::train ? "train.bin" : "test.bin");
  if (is_file(cifar100_file)) {
    return std::make_shared<const CifarDataset>(std::vector<fs::path>{cifar100_file},
                                                CifarOptions{CifarKind::cifar100, labels});
  }
  throw std::runtime_error("CIFAR: no " + std::string(split == CifarSplit::train ? "training" : "test") +
                           " batches in '" + folder.string() + "': expected " +
                           (split == CifarSplit::train ? "data_batch_1.bin .. data_batch_5.bin (CIFAR-10) or train.bin"
                                                       : "test_batch.bin (CIFAR-10) or test.bin") +
                           " (CIFAR-100), the binary version from https://www.cs.toronto.edu/~kriz/cifar.html");
}

std::size_t CifarDataset::record_size() const noexcept {
  return options_.kind == CifarKind::cifar10 ? 1 + pixel_bytes : 2 + pixel_bytes;
}

const CifarDataset::File& CifarDataset::file_of(std::size_t i) const {
  const auto after = std::upper_bound(files_.begin(), files_.end(), i,
                                      [](std::size_t index, const File& file) { return index < file.first; });
  return *(after - 1);
}

int CifarDataset::label(std::size_t i) const {
  if (i >= labels_.size()) detail::item_out_of_range(kind_name(options_.kind), i, labels_.size());
  return labels_[i];
}

std::string CifarDataset::name(std::size_t i) const {
  if (i >= labels_.size()) detail::item_out_of_range(kind_name(options_.kind), i, labels_.size());
  const File& file = file_of(i);
  return file.map->path() + "#" + std::to_string(i - file.first);
}

Sample CifarDataset::read(std::size_t i) const {
  if (i >= labels_.size()) detail::item_out_of_range(kind_name(options_.kind), i, labels_.size());
  const File& file = file_of(i);
  const std::size_t record = record_size();
  const std::byte* pixels = file.map->bytes().data() + (i - file.first) * record + (record - pixel_bytes);
  // Planar R, G, B -> interleaved RGB.
  std::vector<std::byte> rgb(pixel_bytes);
  for (std::size_t p = 0; p < plane; ++p) {
    rgb[3 * p + 0] = pixels[p];
    rgb[3 * p + 1] = pixels[plane + p];
    rgb[3 * p + 2] = pixels[2 * plane + p];
  }
  Sample sample;
  sample.bytes = Bytes(std::move(rgb));
  sample.encoding = Encoding::raw_rgb;
  sample.width = side;
  sample.height = side;
  sample.label = labels_[i];
  sample.index = i;
  sample.name = file.map->path() + "#" + std::to_string(i - file.first);
  return sample;
}

}  // namespace stoke::nodes
