// packed_fuzz: a libFuzzer harness for packed shards (packed.hpp): PackedDataset opens the pair
// X.stoke / X.stoke.idx, then every item's label, name and record is read.
//
// Input: a u32 (little-endian) whose low 31 bits give the index's size n, then n bytes of
// X.stoke.idx, then the rest as X.stoke. Unless the u32's top bit is set, the index's checksum
// is recomputed, so that mutations get past it to the checks behind it and to read().
//
// Any outcome but a dataset or a std::runtime_error -- a crash, a sanitizer report, another
// exception, a hang -- is a bug; so is a record outside the data file.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <stdexcept>
#include <vector>

#include "fuzz_files.hpp"
#include "stoke/nodes/packed.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  static const fs::path path = stoke::fuzz::scratch_dir() / "shard.stoke";
  if (size < 4) return 0;
  const std::uint32_t head = stoke::fuzz::get_u32(data);
  const std::size_t index_size = std::min<std::size_t>(head & 0x7fffffffU, size - 4);
  std::vector<std::uint8_t> index(data + 4, data + 4 + index_size);
  if ((head & 0x80000000U) == 0 && index.size() >= 64) stoke::fuzz::put_u64(&index[56], stoke::fuzz::fnv1a(index, 56));
  const std::span<const std::uint8_t> pack(data + 4 + index_size, size - 4 - index_size);
  stoke::fuzz::write_file(stoke::nodes::pack_index_path(path), index);
  stoke::fuzz::write_file(path, pack);

  try {
    const stoke::nodes::PackedDataset dataset(path);
    for (std::size_t i = 0; i < dataset.size(); ++i) {
      (void)dataset.label(i);
      (void)dataset.name(i);
      const stoke::nodes::Sample sample = dataset.read(i);
      // The item's bytes (read with pread): exactly those its record (offset, size) names, inside
      // the file. An empty item may have no buffer at all (memcmp wants a pointer even for 0).
      const std::uint8_t* record = index.data() + 64 + 32 * i;
      const std::uint64_t offset = stoke::fuzz::get_u64(record);
      const std::span<const std::byte> bytes = sample.bytes.span();
      if (offset > pack.size() || bytes.size() > pack.size() - offset ||
          (!bytes.empty() && std::memcmp(bytes.data(), pack.data() + offset, bytes.size()) != 0)) {
        std::abort();
      }
    }
  } catch (const std::runtime_error&) {
  }
  return 0;
}
