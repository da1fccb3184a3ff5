// The built-in data formats of DatasetRegistry: how each recognises a path and opens it.
#include <array>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <stoke/base/byte_size.hpp>
#include <stoke/remote/url.hpp>
#include <string_view>

#include "stoke/nodes/cifar.hpp"
#include "stoke/nodes/coco_dataset.hpp"
#include "stoke/nodes/dataset_registry.hpp"
#include "stoke/nodes/file_list.hpp"
#include "stoke/nodes/image_folder.hpp"
#include "stoke/nodes/packed.hpp"
#include "stoke/nodes/segmentation_folder.hpp"
#include "stoke/nodes/tar_shards.hpp"

namespace stoke::nodes {

namespace fs = std::filesystem;

namespace {

bool starts_with_magic(const fs::path& path, std::string_view magic) {
  std::ifstream in(path, std::ios::binary);
  std::array<char, 8> head{};
  in.read(head.data(), head.size());
  return in.gcount() == static_cast<std::streamsize>(magic.size()) && std::string_view(head.data(), 8) == magic;
}

// ustar/pax/GNU tar: "ustar" at byte 257 of the first header.
bool has_tar_magic(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::array<char, 262> head{};
  in.read(head.data(), head.size());
  return in.gcount() == static_cast<std::streamsize>(head.size()) && std::string_view(head.data() + 257, 5) == "ustar";
}

// WebDataset shards: .tar files (compressed ones too, which TarShards refuses by name) and no
// subfolder but hidden ones.
bool looks_like_tar_shards(const fs::path& dir) {
  bool shards = false;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.front() == '.') continue;
    if (entry.is_directory()) return false;
    shards = shards || is_tar_shard_name(entry.path());
  }
  return shards;
}

// A brace or wildcard pattern of shards ("shards/train-{000000..000146}.tar"), as WebDataset
// takes them: only when no file has that name.
bool is_shard_pattern(const fs::path& path) { return path.native().find_first_of("{*?[") != std::string::npos; }

bool looks_like_cifar(const fs::path& dir) {
  for (const char* name :
       {"data_batch_1.bin", "test_batch.bin", "train.bin", "test.bin", "cifar-10-batches-bin", "cifar-100-binary"}) {
    if (fs::exists(dir / name)) return true;
  }
  return false;
}

// images/ and masks/ side by side, and nothing else but hidden entries and files.
bool looks_like_segmentation(const fs::path& dir) {
  if (!fs::is_directory(dir / "images") || !fs::is_directory(dir / "masks")) return false;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name != "images" && name != "masks" && name.front() != '.') return false;
  }
  return true;
}

bool folder(fs::file_status status) { return fs::is_directory(status); }
bool file(fs::file_status status) { return fs::exists(status) && !fs::is_directory(status); }

TarShardsOptions tar_options(const Params& p) {
  TarShardsOptions options;
  const std::string on_error = p.get_string("on_shard_error", "fail");
  if (on_error != "fail" && on_error != "skip") {
    throw std::invalid_argument("tar: parameter on_shard_error='" + on_error + "' is not fail or skip");
  }
  options.on_shard_error = on_error == "skip" ? ShardFailure::skip : ShardFailure::fail;
  options.cache_dir = p.get_string("cache", "");
  const std::string budget = p.get_string("cache_bytes", "0");
  const std::optional<std::uint64_t> bytes = base::parse_byte_size(budget);
  if (!bytes) {
    throw std::invalid_argument("tar: parameter cache_bytes='" + budget + "' is not a size like 512M or 20G");
  }
  options.cache_bytes = *bytes;
  if (options.cache_dir.empty() != (options.cache_bytes == 0)) {
    throw std::invalid_argument(
        "tar: give cache and cache_bytes together (a folder and its budget, e.g. cache=" +
        std::string(options.cache_dir.empty() ? "/scratch/shards" : options.cache_dir.string()) +
        " cache_bytes=20G), or neither");
  }
  options.prefetch = p.get_bool("prefetch", true);
  const int window = p.get_int("window", 0);
  if (window < 0) throw std::invalid_argument("tar: parameter window=" + std::to_string(window) + " is below 0");
  options.window = static_cast<std::uint32_t>(window);
  const std::string memory = p.get_string("memory", "2G");
  const std::optional<std::uint64_t> memory_bytes = base::parse_byte_size(memory);
  if (!memory_bytes) {
    throw std::invalid_argument("tar: parameter memory='" + memory + "' is not a size like 512M or 2G");
  }
  options.memory_bytes = *memory_bytes;
  return options;
}

DatasetEntry tar_entry() {
  return {.name = "tar",
          .doc =
              "WebDataset tar shards: a .tar file, a folder of them, or a pattern such as "
              "shards/train-{000000..000146}.tar",
          .params = {{"on_shard_error", "string", "fail",
                      "a shard that cannot be opened (missing, forbidden, not a tar): fail, or skip it and name it"},
                     {"cache", "string", "", "remote shards: a folder to keep whole shards in (empty: range reads)"},
                     {"cache_bytes", "string", "0", "remote shards: the cache folder's budget, e.g. 20G"},
                     {"prefetch", "bool", "true", "remote shards: fill the cache's free room ahead of the reads"},
                     {"window", "int", "0",
                      "shuffle by shards: visit the shards in a shuffled order this many at a time, the samples of "
                      "each window shuffled together (0: every sample among all)"},
                     {"memory", "string", "2G",
                      "remote shards without a cache: stream whole shards into memory ahead of the reads, within "
                      "this budget (0: a range request per sample); give a window"}},
          .open = [](const fs::path& path, const Params& p) -> DatasetPtr {
            const TarShardsOptions options = tar_options(p);
            if (!fs::exists(path) && is_shard_pattern(path)) {
              return std::make_shared<TarShards>(expand_shard_pattern(path.string()), options);
            }
            return std::make_shared<TarShards>(path, options);
          },
          .takes = DataPath::any,
          .recognise =
              [](const fs::path& path, fs::file_status status) {
                if (remote::RemoteUrl::is_remote(path.native())) {
                  return is_tar_shard_name(path) || is_shard_pattern(path);
                }
                if (!fs::exists(status)) return is_shard_pattern(path);
                if (folder(status)) return looks_like_tar_shards(path);
                return is_tar_shard_name(path) || has_tar_magic(path);
              },
          .guess_order = 30};
}

DatasetEntry packed_entry() {
  return {
      .name = "packed",
      .doc = "a packed shard written by `stoke pack` (X.stoke beside its X.stoke.idx)",
      .params = {},
      .open = [](const fs::path& path, const Params&) -> DatasetPtr { return std::make_shared<PackedDataset>(path); },
      .takes = DataPath::file,
      .recognise =
          [](const fs::path& path, fs::file_status status) {
            if (!file(status)) return false;
            if (path.extension() == ".idx") {
              throw std::runtime_error(path.string() + ": this is a pack's index; give the data file " +
                                       (path.parent_path() / path.stem()).string());
            }
            return path.extension() == ".stoke" || starts_with_magic(path, "STOKEDAT");
          },
      .guess_order = 40};
}

DatasetEntry cifar_entry() {
  return {.name = "cifar",
          .doc = "CIFAR-10/100 binary batches: the folder of the .bin files, or one holding cifar-10-batches-bin/",
          .params = {{"split", "string", "train", "train or test"},
                     {"labels", "string", "fine", "CIFAR-100's labels: fine (100 classes) or coarse (20)"}},
          .open = [](const fs::path& path, const Params& p) -> DatasetPtr {
            const std::string split = p.get_string("split", "train");
            const std::string labels = p.get_string("labels", "fine");
            if (split != "train" && split != "test") {
              throw std::invalid_argument("cifar: parameter split='" + split + "' is not train or test");
            }
            if (labels != "fine" && labels != "coarse") {
              throw std::invalid_argument("cifar: parameter labels='" + labels + "' is not fine or coarse");
            }
            return CifarDataset::open(path, split == "test" ? CifarSplit::test : CifarSplit::train,
                                      labels == "coarse" ? CifarLabels::coarse : CifarLabels::fine);
          },
          .takes = DataPath::folder,
          .recognise = [](const fs::path& path,
                          fs::file_status status) { return folder(status) && looks_like_cifar(path); },
          .guess_order = 10};
}

DatasetEntry segmentation_entry() {
  return {.name = "segmentation",
          .doc = "images/ and masks/ side by side, paired by file name (masks: PNGs of class ids)",
          .params = {},
          .open = [](const fs::path& path, const Params&) -> DatasetPtr {
            return std::make_shared<SegmentationFolder>(path);
          },
          .takes = DataPath::folder,
          .recognise = [](const fs::path& path,
                          fs::file_status status) { return folder(status) && looks_like_segmentation(path); },
          .guess_order = 20};
}

DatasetEntry coco_entry() {
  return {
      .name = "coco",
      .doc =
          "COCO detection data: the folder of images, with its annotations file (boxes travel "
          "with the samples; no class labels)",
      .params = {{"annotations", "string", "", "the COCO JSON file (e.g. annotations/instances_val2017.json)", true},
                 {"crowd", "bool", "true", "keep crowd annotations (iscrowd=1) as boxes"},
                 {"empty", "bool", "true", "keep images without a box"}},
      .open = [](const fs::path& path, const Params& p) -> DatasetPtr {
        const CocoOptions options{.keep_crowd = p.get_bool("crowd", true), .keep_empty = p.get_bool("empty", true)};
        return std::make_shared<CocoDataset>(p.get_string("annotations", ""), path, options);
      },
      .takes = DataPath::folder};
}

DatasetEntry folder_entry() {
  return {.name = "folder",
          .doc = "an image folder: one subfolder per class (JPEG, PNG, ... and DICOM, extensionless too)",
          .params = {},
          .open = [](const fs::path& path, const Params&) -> DatasetPtr {
            // Scanners name DICOM files without an extension (or by UID): such files are probed.
            return std::make_shared<ImageFolder>(path, ImageFolderOptions{.probe_extensionless_dicom = true});
          },
          .takes = DataPath::folder,
          .recognise = [](const fs::path&, fs::file_status status) { return folder(status); },
          .guess_order = 1000};
}

DatasetEntry filelist_entry() {
  return {.name = "filelist",
          .doc = "a .csv/.txt/.lst file of `path,label` lines",
          .params = {{"root", "string", "", "the folder the paths are relative to (default: the list's folder)"}},
          .open = [](const fs::path& path, const Params& p) -> DatasetPtr {
            const std::string root = p.get_string("root", "");
            return std::make_shared<FileList>(path, root.empty() ? path.parent_path() : fs::path(root));
          },
          .takes = DataPath::file,
          .recognise = [](const fs::path&, fs::file_status status) { return file(status); },
          .guess_order = 1000};
}

}  // namespace

void register_builtin_datasets(DatasetRegistry& registry) {
  for (DatasetEntry entry : {folder_entry(), segmentation_entry(), filelist_entry(), cifar_entry(), packed_entry(),
                             tar_entry(), coco_entry()}) {
    registry.add(std::move(entry));
  }
}

}  // namespace stoke::nodes
