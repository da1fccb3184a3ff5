// tar_fuzz: a libFuzzer harness for WebDataset tar shards (tar_shards.hpp): the input is a tar
// file. TarShards indexes it (libarchive reads the headers; the index is kept in memory, no file
// is written), then every sample is read: its key, label, image, mask and .json targets.
//
// Any outcome but a dataset or a std::runtime_error (no sample, not a tar, a .json that is not a
// flat object) -- a crash, a sanitizer report, another exception, a hang -- is a bug; so is a
// label outside -1..999999 or classes(), or a target whose values do not fill its shape.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "fuzz_files.hpp"
#include "stoke/nodes/tar_shards.hpp"

namespace {

using namespace stoke::nodes;

/// Reads every sample of `dataset`.
void read_all(const TarShards& dataset) {
  for (const IgnoredFile& ignored : dataset.ignored()) (void)ignored;
  for (std::size_t i = 0; i < dataset.size(); ++i) {
    const int label = dataset.label(i);
    if (label < -1 || label > 999999 || (label >= 0 && static_cast<std::size_t>(label) >= dataset.classes().size())) {
      std::abort();
    }
    (void)dataset.key(i);
    (void)dataset.name(i);
    if (dataset.shard_of(i) >= dataset.shards().size()) std::abort();
    try {
      const Sample sample = dataset.read(i);
      for (const auto& [name, target] : sample.targets) {
        if (target.elements() != static_cast<std::int64_t>(target.values.size())) std::abort();
      }
    } catch (const std::runtime_error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path shard = stoke::fuzz::scratch_dir() / "shard.tar";
  stoke::fuzz::write_file(shard, {data, size});
  TarShardsOptions options;
  options.write_index = false;
  options.fallback_index_dir.clear();
  try {
    const TarShards dataset(shard, options);
    read_all(dataset);
  } catch (const std::runtime_error&) {
  }
  return 0;
}
