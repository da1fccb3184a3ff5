// stoke: one executable, one subcommand per source file (see commands.hpp).
#include <array>
#include <exception>
#include <iostream>
#include <stoke/nn/blas.hpp>
#include <string_view>

#include "cli.hpp"
#include "commands.hpp"
#include "version.hpp"

namespace {

constexpr std::array commands{
    stoke::app::Subcommand{"train", "train an image classifier end to end (stoke train --help)", stoke::app::train},
    stoke::app::Subcommand{"classify",
                           "print the top classes of images by a trained checkpoint (stoke classify --help)",
                           stoke::app::classify},
    stoke::app::Subcommand{"evaluate",
                           "accuracy and confusion matrix of a checkpoint on a dataset (stoke evaluate --help)",
                           stoke::app::evaluate},
    stoke::app::Subcommand{"bench", "measure the throughput of stoke's parts (stoke bench --help)", stoke::app::bench},
    stoke::app::Subcommand{"pack", "pack an image folder or file list into one shard + index for fast reading",
                           stoke::app::pack},
    stoke::app::Subcommand{"gen-shapes", "write a synthetic shapes dataset of JPEG files (stoke gen-shapes --help)",
                           stoke::app::gen_shapes},
};

constexpr std::string_view summary =
    "stoke keeps the GPU stoked: streaming input pipelines for training and inference.";

}  // namespace

int main(int argc, char** argv) {
  // Before anything loads work onto OpenBLAS: it may need to load again with faster kernels.
  stoke::nn::use_fastest_blas_kernels(argv);
  try {
    if (argc == 2 && std::string_view(argv[1]) == "--version") {
      std::cout << "stoke " << stoke::app::version << '\n';
      return 0;
    }
    return stoke::app::dispatch("", summary, commands, argc, argv);
  } catch (const std::exception& error) {
    std::cerr << "stoke: " << error.what() << '\n';
  } catch (...) {
    std::cerr << "stoke: unknown exception\n";
  }
  return 1;
}
