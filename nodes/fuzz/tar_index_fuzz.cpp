// tar_index_fuzz: a libFuzzer harness for the index files of tar shards (tar_shards.hpp,
// "X.tar.stoke-idx"): the input is the index of a fixed, valid shard (fixed_tar.hpp). The
// harness writes the shard once, and for each input puts the shard's size and modification time
// into the index's header and recomputes its checksum (inputs of 64 bytes or more), so that
// mutations reach the entry records instead of stopping at those checks. TarShards then loads the
// index (or, when it refuses it, indexes the shard itself, in memory) and every sample is read.
//
// Any outcome but a dataset or a std::runtime_error -- a crash, a sanitizer report, another
// exception, a hang -- is a bug; so is a label outside -1..999999 or classes().
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "fixed_tar.hpp"
#include "fuzz_files.hpp"
#include "stoke/nodes/tar_shards.hpp"

namespace {

using namespace stoke::nodes;

struct Shard {
  std::filesystem::path path;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
};

const Shard& fixed_shard() {
  static const Shard shard = [] {
    Shard s{stoke::fuzz::scratch_dir() / "fixed.tar"};
    stoke::fuzz::write_fixed_tar(s.path);
    struct stat info {};
    if (::stat(s.path.c_str(), &info) != 0) std::abort();
    s.size = static_cast<std::uint64_t>(info.st_size);
    s.mtime_ns = static_cast<std::int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec;
    return s;
  }();
  return shard;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Shard& shard = fixed_shard();
  std::vector<std::uint8_t> index(data, data + size);
  if (index.size() >= 64) {
    stoke::fuzz::put_u64(&index[16], shard.size);
    stoke::fuzz::put_u64(&index[24], static_cast<std::uint64_t>(shard.mtime_ns));
    stoke::fuzz::put_u64(&index[56], stoke::fuzz::fnv1a(index, 56));
  }
  stoke::fuzz::write_file(tar_index_path(shard.path), index);
  TarShardsOptions options;
  options.write_index = false;
  options.fallback_index_dir.clear();
  try {
    const TarShards dataset(shard.path, options);
    for (std::size_t i = 0; i < dataset.size(); ++i) {
      const int label = dataset.label(i);
      if (label < -1 || label > 999999 || (label >= 0 && static_cast<std::size_t>(label) >= dataset.classes().size())) {
        std::abort();
      }
      (void)dataset.name(i);
      if (dataset.shard_of(i) >= dataset.shards().size()) std::abort();
      try {
        (void)dataset.read(i);
      } catch (const std::runtime_error&) {
      }
    }
  } catch (const std::runtime_error&) {
  }
  return 0;
}
