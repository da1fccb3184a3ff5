// stoke_bench_bookkeeping: the memory a file-backed dataset keeps per file it lists, beyond the
// bytes of the paths themselves. Nothing is opened but the list (and the folder tree): the files
// of the list need not exist. In order:
//
//   ImageFolder       a synthetic tree of M empty .jpg files (default 20,000) in 100 class folders
//                     under the temporary folder, listed by nodes::ImageFolder
//   FileList          a synthetic list of N lines (default 1,000,000),
//                     "data/class_0042/image_0001234.jpg,42", written to a temporary file and
//                     parsed by nodes::FileList (root /data/root)
//   FileList-columns  the same N items in the column format, path,label,mask,age: a mask path per
//                     item (counted with the path bytes) and a scalar float target (--no-columns
//                     skips it)
//
// For each it prints the entries, the bytes of the resolved paths (what name(i) returns, summed,
// plus the mask paths), the heap the dataset holds (mallinfo2's allocated bytes, arenas and
// mapped blocks, after minus before, divided by the entries), that heap beyond the path bytes per
// file, and whether the target (at most 100 bytes per file beyond the paths) is met; also VmRSS
// and VmHWM (the peak so far) of the process from /proc/self/status. A `result ...` line per
// dataset follows, for scripts.
//
// Then the soak (--soak-epochs E, default 20; 0 skips it): E short epochs of one input pipeline
// over 1,000 shapes images, VmRSS at each epoch's end; the target is the last within 2% of the
// second. Exits 1 when a target is missed.
//
//   stoke_bench_bookkeeping [--files N] [--folder-files M] [--no-columns] [--soak-epochs E] [--dir /tmp]
#include <malloc.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/stream.hpp>
#include <stoke/nodes/file_list.hpp>
#include <stoke/nodes/image_folder.hpp>
#include <stoke/nodes/shapes.hpp>
#include <stoke/train/epoch.hpp>
#include <vector>
#include <string>
#include <string_view>

namespace {

namespace fs = std::filesystem;
using namespace stoke;

constexpr double target_bytes_per_file = 100.0;
constexpr std::size_t folder_classes = 100;

/// The bytes malloc has handed out: from its arenas, and large blocks mapped on their own.
std::size_t heap_bytes() {
  malloc_trim(0);
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

/// VmRSS and VmHWM from /proc/self/status, in KiB (0 when unreadable).
struct Rss {
  std::size_t rss_kib = 0;
  std::size_t hwm_kib = 0;
};

Rss rss() {
  Rss out;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    const auto value = [&] { return static_cast<std::size_t>(std::strtoull(line.c_str() + 6, nullptr, 10)); };
    if (line.starts_with("VmRSS:")) out.rss_kib = value();
    if (line.starts_with("VmHWM:")) out.hwm_kib = value();
  }
  return out;
}

std::string class_name(std::size_t c) {
  char text[32];
  std::snprintf(text, sizeof text, "class_%04zu", c);
  return text;
}

std::string image_name(std::size_t i) {
  char text[32];
  std::snprintf(text, sizeof text, "image_%07zu.jpg", i);
  return text;
}

/// Opens the dataset with `open`, and prints and returns whether the target is met. The path bytes
/// of item i are `path_bytes_of(dataset, i)`.
template <class Open, class PathBytes>
bool measure(const char* what, Open open, PathBytes path_bytes_of) {
  const std::size_t heap_before = heap_bytes();
  const Rss rss_before = rss();
  auto dataset = open();
  const std::size_t heap_after = heap_bytes();
  const Rss rss_after = rss();

  const std::size_t n = dataset->size();
  std::size_t path_bytes = 0;
  for (std::size_t i = 0; i < n; ++i) path_bytes += path_bytes_of(*dataset, i);
  const double held = n == 0 ? 0.0 : static_cast<double>(heap_after - heap_before) / static_cast<double>(n);
  const double beyond = n == 0 ? 0.0 : held - static_cast<double>(path_bytes) / static_cast<double>(n);
  const bool met = beyond <= target_bytes_per_file;
  std::printf("%s\n", what);
  std::printf("  entries                     %zu\n", n);
  std::printf("  path bytes                  %zu (%.1f per file)\n", path_bytes,
              n == 0 ? 0.0 : static_cast<double>(path_bytes) / static_cast<double>(n));
  std::printf("  heap held                   %.1f MiB (%.1f bytes per file)\n",
              static_cast<double>(heap_after - heap_before) / (1024.0 * 1024.0), held);
  std::printf("  beyond the path bytes       %.1f bytes per file (target <= %.0f: %s)\n", beyond, target_bytes_per_file,
              met ? "met" : "NOT met");
  std::printf("  VmRSS                       %zu -> %zu KiB (%+.1f bytes per file)\n", rss_before.rss_kib,
              rss_after.rss_kib,
              n == 0 ? 0.0
                     : (static_cast<double>(rss_after.rss_kib) - static_cast<double>(rss_before.rss_kib)) * 1024.0 /
                           static_cast<double>(n));
  std::printf("  VmHWM (peak)                %zu -> %zu KiB\n", rss_before.hwm_kib, rss_after.hwm_kib);
  std::printf("result %s entries=%zu path_bytes=%zu held_per_file=%.1f beyond_per_file=%.1f met=%d\n", what, n,
              path_bytes, held, beyond, met ? 1 : 0);
  std::fflush(stdout);
  return met;
}

std::size_t parse_count(std::string_view flag, const char* value) {
  if (value == nullptr) throw std::invalid_argument(std::string(flag) + " needs a number");
  char* end = nullptr;
  const unsigned long long n = std::strtoull(value, &end, 10);
  if (end == value || *end != '\0')
    throw std::invalid_argument(std::string(flag) + ": '" + value + "' is not a number");
  return static_cast<std::size_t>(n);
}

/// Removes the temporary folder on every way out.
struct TempDir {
  fs::path path;
  ~TempDir() {
    std::error_code error;
    fs::remove_all(path, error);
  }
};

}  // namespace

// The soak: `epochs` short epochs of one pipeline (read, decode + random crop + flip, batch, a
// compute stage that does nothing) over a small shapes dataset, VmRSS read at each epoch's end.
// Memory that grows with the epochs (a queue, a pool, a per-epoch table never freed) shows as the
// last epoch's RSS above the second's (the first still allocates its pools and caches).
bool soak(const fs::path& dir, std::uint32_t epochs) {
  const fs::path root = dir / "soak";
  nodes::write_shapes_dataset({.out = root, .classes = 4, .train_per_class = 250, .val_per_class = 0, .size = 48,
                               .seed = 1, .quality = 90, .force = false, .threads = 2});
  const auto dataset = std::make_shared<nodes::ImageFolder>(root / "train");
  train::InputConfig config;
  config.batch_size = 32;
  config.size = 32;
  config.transforms = {"random_resized_crop size=32", "random_horizontal_flip", "normalize"};
  train::ComputePath path(dataset, config, gpu::Device::cpu(), gpu::StreamView::host());
  std::vector<double> rss_mib;
  path.run_epochs([](const train::BatchTensors&) { return train::StepResult{}; }, {.stage = "train"}, {}, epochs,
                  [&](std::uint32_t epoch, train::EpochTotals& totals) {
                    rss_mib.push_back(static_cast<double>(rss().rss_kib) / 1024.0);
                    std::printf("  epoch %2u: %lld images, VmRSS %.1f MiB\n", epoch + 1,
                                static_cast<long long>(totals.images), rss_mib.back());
                    return true;
                  });
  const double ratio = rss_mib.size() >= 2 ? rss_mib.back() / rss_mib[1] : 0;
  const bool flat = ratio > 0 && ratio <= 1.02;
  std::printf("soak: %u epochs of %zu images; VmRSS at the last epoch's end / at the second's = %.4f (%s)\n",
              epochs, dataset->size(), ratio, flat ? "within 2%" : "more than 2%: memory grows with the epochs");
  std::printf("result soak epochs=%u rss_second_mib=%.1f rss_last_mib=%.1f ratio=%.4f\n", epochs,
              rss_mib.size() >= 2 ? rss_mib[1] : 0.0, rss_mib.empty() ? 0.0 : rss_mib.back(), ratio);
  return flat;
}

int main(int argc, char** argv) try {
  std::size_t files = 1'000'000;
  std::size_t folder_files = 20'000;
  fs::path dir = fs::temp_directory_path();
  bool columns = true;
  std::uint32_t soak_epochs = 20;
  for (int a = 1; a < argc; ++a) {
    const std::string_view arg = argv[a];
    const char* value = a + 1 < argc ? argv[a + 1] : nullptr;
    if (arg == "--files") {
      files = parse_count(arg, value);
      ++a;
    } else if (arg == "--folder-files") {
      folder_files = parse_count(arg, value);
      ++a;
    } else if (arg == "--soak-epochs") {
      soak_epochs = static_cast<std::uint32_t>(parse_count(arg, value));
      ++a;
    } else if (arg == "--no-columns") {
      columns = false;
    } else if (arg == "--dir" && value != nullptr) {
      dir = value;
      ++a;
    } else {
      std::fprintf(stderr,
                   "usage: stoke_bench_bookkeeping [--files N] [--folder-files M] [--no-columns] [--soak-epochs E] "
                   "[--dir /tmp]\n");
      return 2;
    }
  }
  TempDir temp{dir / ("stoke_bench_bookkeeping." + std::to_string(::getpid()))};
  fs::create_directories(temp.path);

  const auto name_bytes = [](const nodes::Dataset& dataset, std::size_t i) { return dataset.name(i).size(); };
  bool met = true;
  if (folder_files > 0) {
    const fs::path root = temp.path / "folder";
    for (std::size_t c = 0; c < folder_classes; ++c) fs::create_directories(root / class_name(c));
    for (std::size_t i = 0; i < folder_files; ++i) {
      std::ofstream(root / class_name(i % folder_classes) / image_name(i), std::ios::binary);
    }
    const auto open = [&] { return std::make_unique<nodes::ImageFolder>(root); };
    met = measure("ImageFolder", open, name_bytes) && met;
  }
  if (files > 0) {
    const fs::path list = temp.path / "list.csv";
    {
      std::ofstream out(list, std::ios::binary);
      out << "path,label\n";
      for (std::size_t i = 0; i < files; ++i) {
        const std::size_t label = i % 1000;
        out << "data/" << class_name(label) << '/' << image_name(i) << ',' << label << '\n';
      }
      if (!out) throw std::runtime_error("cannot write " + list.string());
    }
    const auto open = [&] { return std::make_unique<nodes::FileList>(list, fs::path("/data/root")); };
    met = measure("FileList", open, name_bytes) && met;
    fs::remove(list);
  }
  if (files > 0 && columns) {
    // The column format: a mask per item (its path counts as path bytes) and a scalar target.
    const fs::path list = temp.path / "columns.csv";
    {
      std::ofstream out(list, std::ios::binary);
      out << "path,label,mask,age\n";
      for (std::size_t i = 0; i < files; ++i) {
        const std::size_t label = i % 1000;
        out << "data/" << class_name(label) << '/' << image_name(i) << ',' << label << ",masks/" << class_name(label)
            << '/' << image_name(i) << ',' << (i % 90) << '\n';
      }
      if (!out) throw std::runtime_error("cannot write " + list.string());
    }
    const auto path_and_mask_bytes = [](const nodes::FileList& dataset, std::size_t i) {
      return dataset.name(i).size() + dataset.mask_path(i).native().size();
    };
    const auto open = [&] { return std::make_unique<nodes::FileList>(list, fs::path("/data/root")); };
    met = measure("FileList-columns", open, path_and_mask_bytes) && met;
  }
  if (soak_epochs >= 2) met = soak(temp.path, soak_epochs) && met;
  return met ? 0 : 1;
} catch (const std::exception& error) {
  std::fprintf(stderr, "stoke_bench_bookkeeping: %s\n", error.what());
  return 1;
}
