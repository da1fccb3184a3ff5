// What the stoke::train tests share: a tiny shapes dataset on disk and a small CNN with its
// trainer on the CPU backend (or a given device), so that each test trains or evaluates in a
// fraction of a second; and what a report page says about the compute busy.
#pragma once

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
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

/// The compute busy (0..1) of a `stoke train --report` page, the three ways it shows it: the
/// summary's card, the mean of the throughput plot's series over the training phases weighted by
/// their intervals (what the page's script draws), and the epoch table's, each epoch weighted by
/// its training phase's length; and the GPU (NVML) card. -1 for what the page lacks.
struct ReportBusy {
  double card = -1;
  double drawn = -1;
  double table = -1;
  double gpu_card = -1;
  /// The stage named "train" in the training phases' totals, weighted by their lengths: what the
  /// three above are all meant to be (not the "train results" stage after it).
  double train_stage = -1;
};

inline ReportBusy report_busy(const std::string& page) {
  const auto card = [&](const std::string& label) {
    const std::string open = "<div class=\"k\">" + label + "</div><div class=\"v\">";
    const auto at = page.find(open);
    return at == std::string::npos ? -1.0 : std::stod(page.substr(at + open.size())) / 100;
  };
  const std::string open = "<script type=\"application/json\" id=\"report-data\">";
  const auto begin = page.find(open);
  if (begin == std::string::npos) return {};
  const auto end = page.find("</script>", begin);
  const auto data = nlohmann::json::parse(page.substr(begin + open.size(), end - begin - open.size()));
  const auto& phases = data["phases"];
  const auto& samples = data["samples"];

  ReportBusy busy{.card = card("compute busy, training"), .gpu_card = card("GPU busy (NVML), training")};
  double sum = 0, time = 0;
  for (std::size_t i = 0; i < samples["t"].size(); ++i) {
    if (phases[samples["phase"][i].get<std::size_t>()]["name"] != "train") continue;
    sum += samples["compute"][i].get<double>() * samples["dt"][i].get<double>();
    time += samples["dt"][i].get<double>();
  }
  if (time > 0) busy.drawn = sum / time;
  sum = time = 0;
  for (const auto& e : data["epochs"]) {
    for (const auto& p : phases) {
      if (p["epoch"] != e["epoch"] || p["name"] != "train") continue;
      sum += e["compute_busy"].get<double>() * p["elapsed"].get<double>();
      time += p["elapsed"].get<double>();
    }
  }
  if (time > 0) busy.table = sum / time;
  sum = time = 0;
  for (const auto& p : phases) {
    if (p["name"] != "train") continue;
    for (const auto& stage : p["stages"]) {
      if (stage["name"] != "train") continue;
      sum += stage["busy"].get<double>() * p["elapsed"].get<double>();
      time += p["elapsed"].get<double>();
    }
  }
  if (time > 0) busy.train_stage = sum / time;
  return busy;
}

/// The small CNN on the CPU at 16 px with a trainer for `epochs` epochs of `images` images in
/// batches of 4: the same weights, schedule and seeds for every instance.
struct TinyRun {
  static constexpr std::size_t batch = 4;

  TinyRun(std::size_t images, int epochs, gpu::Device device = gpu::Device::cpu())
      : backend(nn::make_backend(device)),
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
