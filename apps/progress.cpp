#include "progress.hpp"

#include <cstdio>
#include <stoke/train/builtin.hpp>

namespace stoke::app {

std::filesystem::path builtin_dataset_with_progress(bool quiet) {
  if (quiet) return train::builtin_dataset();
  bool started = false;
  return train::builtin_dataset([&](std::size_t written, std::size_t total) {
    if (!started) {
      std::fprintf(stderr, "stoke: writing the built-in shapes dataset to %s (once)\n",
                   train::builtin_dataset_folder().c_str());
      started = true;
    }
    std::fprintf(stderr, "\r  %zu / %zu images%s", written, total, written == total ? "\n" : "");
  });
}

}  // namespace stoke::app
