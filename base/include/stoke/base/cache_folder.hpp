// cache_folder: where stoke keeps what it can rebuild -- the built-in dataset, tar shard indexes,
// cuDNN's algorithm choices -- one rule for all of them.
//
//   const std::filesystem::path folder = stoke::base::cache_folder();
//   if (!folder.empty()) write_file_atomically(folder / "mine.json", text, "cache");
#pragma once

#include <filesystem>

namespace stoke::base {

/// $STOKE_CACHE, else $XDG_CACHE_HOME/stoke, else $HOME/.cache/stoke (an empty variable counts as
/// unset); an empty path when none of the three is set, for the caller to choose (a folder of its
/// own, or no cache).
std::filesystem::path cache_folder();

}  // namespace stoke::base
