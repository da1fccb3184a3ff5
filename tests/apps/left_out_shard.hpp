// A WebDataset tar shard with two members that any reader of it leaves out when it opens
// (nodes::TarShards::ignored()), written by the system `tar` as a user would: for the tests that
// every front end counts and names them apart from the files it skips.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "dataset_test_support.hpp"

namespace stoke::test {

/// What shard_with_left_out_members() leaves out, as the dataset names them ("<shard>#<member>").
struct LeftOutShard {
  std::filesystem::path shard;
  std::string bad_label;  ///< the sample whose .cls is "banana": "<shard>#bad.cls"
  std::string symlink;    ///< the symlink member: "<shard>#link.jpg"
};

/// `dir`/shard.tar, made by `tar -cf` from `dir`/members: 2 classes x `per_class` samples (kNN.jpg +
/// kNN.cls holding "0" or "1"), a sample bad.jpg + bad.cls holding "banana", and link.jpg, a
/// symlink (`ln -s`) to one of the images.
inline LeftOutShard shard_with_left_out_members(const std::filesystem::path& dir, int per_class = 8) {
  const std::filesystem::path members = dir / "members";
  for (int i = 0; i < 2 * per_class; ++i) {
    const std::string key = (i < 10 ? "k0" : "k") + std::to_string(i);
    nodes::test::write_bytes(members / (key + ".jpg"), nodes::test::small_jpeg(i));
    nodes::test::write_text(members / (key + ".cls"), i < per_class ? "0" : "1");
  }
  nodes::test::write_bytes(members / "bad.jpg", nodes::test::small_jpeg(99));
  nodes::test::write_text(members / "bad.cls", "banana");
  // The members in name order, so that each sample's files are next to each other.
  const std::string command = "cd '" + members.string() + "' && ln -s k00.jpg link.jpg && LC_ALL=C tar -cf '" +
                              (dir / "shard.tar").string() + "' *";
  if (std::system(command.c_str()) != 0) throw std::runtime_error("failed: " + command);
  const std::string shard = (dir / "shard.tar").string();
  return {dir / "shard.tar", shard + "#bad.cls", shard + "#link.jpg"};
}

}  // namespace stoke::test
