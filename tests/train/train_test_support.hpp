// What the stoke::train tests share: a tiny shapes dataset on disk and a small CNN with its
// trainer on the CPU backend, so that each test trains or evaluates in a fraction of a second.
#pragma once

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/models.hpp>
#include <stoke/nn/trainer.hpp>
#include <stoke/nodes/shapes.hpp>
#include <string>
#include <utility>
#include <vector>

#include "dataset_test_support.hpp"
#include "stoke/train/fit.hpp"
#include "stoke/train/input.hpp"

namespace stoke::train::test {

using nodes::test::TempDir;

/// 2 classes of 16 px shapes: `per_class` training and 4 validation images each, under dir/shapes.
inline std::filesystem::path write_tiny_shapes(const TempDir& dir, std::size_t per_class = 8) {
  const std::filesystem::path root = dir / "shapes";
  nodes::write_shapes_dataset({.out = root,
                               .classes = 2,
                               .train_per_class = per_class,
                               .val_per_class = 4,
                               .size = 16,
                               .seed = 1,
                               .quality = 90,
                               .force = false,
                               .threads = 1});
  return root;
}

/// One pass over write_tiny_shapes' 16 training images in their order: batches of 4 at 16 px
/// through `transforms`, 2 threads, no scheduler.
inline InputConfig tiny_pass_input(std::vector<std::string> transforms = {"resize size=16", "normalize"}) {
  InputConfig config;
  config.batch_size = 4;
  config.size = 16;
  config.transforms = std::move(transforms);
  config.threads = 2;
  config.autotune = false;
  config.shuffle = false;
  return config;
}

/// The bytes of a file, to compare checkpoints.
inline std::string bytes_of(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

/// The small CNN on the CPU at 16 px with a trainer for `epochs` epochs of `images` images in
/// batches of 4: the same weights, schedule and seeds for every instance.
struct TinyRun {
  static constexpr std::size_t batch = 4;

  TinyRun(std::size_t images, int epochs)
      : backend(nn::make_backend(gpu::Device::cpu())),
        model(nn::make_model("small_cnn", {.classes = 2, .seed = 3, .width = 8})),
        trainer(*model, *backend,
                {.sgd = {},
                 .schedule =
                     epoch_schedule(nn::LrScheduleKind::cosine, 0.05f, 0.5, steps_per_epoch(images, batch, 1), epochs),
                 .label_smoothing = 0,
                 .accumulation = 1,
                 .seed = 3,
                 .compute = gpu::DType::f32,
                 .loss_scale = {}}) {
    options.epochs = epochs;
    options.seed = 5;
    options.train_input.batch_size = batch;
    options.train_input.size = 16;
    options.train_input.transforms = {"resize size=16", "random_horizontal_flip", "normalize"};
    options.train_input.threads = 2;
    options.train_input.autotune = false;
    options.val_input = evaluation_input(options.train_input, {"resize size=16", "normalize"});
  }

  std::unique_ptr<nn::Backend> backend;
  std::unique_ptr<nn::Sequential> model;
  nn::Trainer trainer;
  FitOptions options;
};

}  // namespace stoke::train::test
