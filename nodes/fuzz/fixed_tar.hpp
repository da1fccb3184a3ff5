// fixed_tar: the valid tar shard that tar_index_fuzz pairs with its fuzzed index files, and that
// make_fuzz_seeds indexes for that harness's seeds. TarWriter with its default mtime (0) makes it
// byte for byte the same every time: three samples (an image with a label, a mask and targets;
// one with a label and a field nothing reads; one with only an image).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "stoke/nodes/sample.hpp"
#include "stoke/nodes/tar_writer.hpp"

namespace stoke::fuzz {

inline nodes::Bytes text_bytes(const std::string& text) {
  const auto* first = reinterpret_cast<const std::byte*>(text.data());
  return nodes::Bytes(std::vector<std::byte>(first, first + text.size()));
}

/// Writes the fixed shard to `path` (a name ending in ".tar"); no index.
inline void write_fixed_tar(const std::filesystem::path& path) {
  nodes::TarWriter writer(nodes::TarShardPattern(path.string()), {.write_index = false});
  const std::vector<nodes::TarMember> first = {{"jpg", text_bytes("\xff\xd8\xff\xd9 not really a jpeg")},
                                               {"cls", text_bytes("3\n")},
                                               {"mask.png", text_bytes("\x89PNG mask")},
                                               {"json", text_bytes(R"({"age": 63, "box": [1, 2, 3, 4], "x": "y"})")}};
  const std::vector<nodes::TarMember> second = {
      {"png", text_bytes("\x89PNG image")}, {"cls", text_bytes(" 17 ")}, {"txt", text_bytes("a caption")}};
  const std::vector<nodes::TarMember> third = {{"jpeg", text_bytes("\xff\xd8 third")}};
  writer.add("train/000000", first);
  writer.add("train/000001", second);
  writer.add("val/000002", third);
  writer.finish();
}

}  // namespace stoke::fuzz
