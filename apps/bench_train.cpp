// `stoke bench train`: the share of the training step's speed that the whole pipeline delivers.
// Two measurements of the same model, trainer and device, alternated --repeats times: the compute
// bound (train steps on a synthetic batch already on the device, no input at all) and the
// pipeline (source -> read -> decode + augment -> batch -> train step on real files, the
// scheduler on, as `stoke train` runs it). Each counts images over --seconds after the same
// --warmup batches; the ratio of their medians is stoke's headline figure.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <numeric>
#include <stdexcept>
#include <stoke/bench/training.hpp>
#include <stoke/nn/models.hpp>
#include <stoke/train/builtin.hpp>
#include <stoke/train/compute.hpp>
#include <stoke/train/epoch.hpp>
#include <stoke/train/input.hpp>
#include <stoke/train/json.hpp>
#include <stoke/train/recipe.hpp>
#include <stoke/train/step_timing.hpp>
#include <string>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "progress.hpp"

namespace stoke::app {

using namespace stoke::train;  // NOLINT(google-build-using-namespace): the commands are glue over it
namespace {

namespace fs = std::filesystem;
namespace po = boost::program_options;

struct TrainBenchConfig {
  std::string data;  // empty: the built-in shapes dataset
  std::string model = "small_cnn";
  int batch = 64;
  int size = 0;  // 0: default_image_size(model)
  std::string precision = "fp32";
  std::string channels_last = "auto";
  std::string device = "auto";
  int threads = 0;
  std::string autotune = "on";
  double seconds = 10;
  int warmup = 10;
  int repeats = 1;
  std::uint64_t seed = 0;
  bool json = false;
  // from the words above, by check()
  gpu::DType dtype{};
  ChannelsLast layout{};
};

// " (median of 3: 801.2, 812.0, 830.5)"; nothing for one value.
std::string median_of(const std::vector<double>& values) {
  if (values.size() < 2) return "";
  std::string out = " (median of " + std::to_string(values.size()) + ": ";
  char buffer[32];
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::snprintf(buffer, sizeof buffer, "%s%.1f", i == 0 ? "" : ", ", values[i]);
    out += buffer;
  }
  return out + ")";
}

void add_options(CommandOptions& cli, TrainBenchConfig& c) {
  const std::string models = "the model: " + nn::model_names();
  cli.add()("data", po::value(&c.data),
            "training images: an ImageFolder, a file list, CIFAR batches or a .stoke shard")(
      "model", po::value(&c.model)->default_value(c.model), models.c_str())(
      "batch", po::value(&c.batch)->default_value(c.batch), "images per batch")(
      "size", po::value(&c.size)->default_value(c.size),
      "image side in pixels (0: 32 for small_cnn/mobilenet, else 224)")(
      "precision", po::value(&c.precision)->default_value(c.precision), "fp32, or bf16 / fp16 mixed precision (CUDA)")(
      "channels-last", po::value(&c.channels_last)->default_value(c.channels_last), channels_last_help)(
      "device", po::value(&c.device)->default_value(c.device), "auto, cpu, cuda or cuda:N")(
      "threads", po::value(&c.threads)->default_value(c.threads), "input threads (0: the scheduler's choice)")(
      "autotune", po::value(&c.autotune)->default_value(c.autotune), "on or off: the scheduler moves input threads")(
      "seconds", po::value(&c.seconds)->default_value(c.seconds), "counted seconds of each measurement")(
      "warmup", po::value(&c.warmup)->default_value(c.warmup), "batches first in each measurement, not counted")(
      "repeats", po::value(&c.repeats)->default_value(c.repeats), "rounds (compute bound, pipeline); medians shown")(
      "seed", po::value(&c.seed)->default_value(c.seed), "shuffling, augmentation, initial weights")(
      "json", po::bool_switch(&c.json), "one JSON object on stdout instead of the text");
}

// A usage mistake the parser cannot see, or "" when there is none; fills c.dtype and c.layout.
std::string check(TrainBenchConfig& c) {
  if (c.batch < 1 || c.size < 0 || (c.size > 0 && c.size < 8) || c.threads < 0 || c.warmup < 0) {
    return "--batch must be at least 1, --size 0 (the model's) or at least 8, --threads and --warmup >= 0";
  }
  if (!(c.seconds > 0) || !std::isfinite(c.seconds)) {
    return "--seconds must be more than 0 (got " + std::to_string(c.seconds) + ")";
  }
  if (c.repeats < 1 || c.repeats > 100) return "--repeats must be in 1..100";
  if (std::string mistake = choice_error("autotune", c.autotune, {"on", "off"}); !mistake.empty()) return mistake;
  try {
    c.dtype = compute_dtype(c.precision);
    c.layout = parse_channels_last(c.channels_last);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  if (c.device == "cpu" && c.dtype != gpu::DType::f32) {  // before anything is logged or loaded
    return "--precision " + c.precision + " needs a CUDA device; the CPU computes in fp32 only";
  }
  return "";
}

// What the measurement ran on, for the result's lines.
struct Setup {
  int size = 0;
  bool channels_last = false;
  std::string device;
  bool cpu = true;
  std::string data;
  std::size_t images = 0;
};

void print_json_result(const TrainBenchConfig& c, const Setup& setup, const bench::TrainingBenchResult& result) {
  nlohmann::ordered_json runs = nlohmann::ordered_json::array();
  for (const bench::TrainingRound& r : result.rounds) {
    runs.push_back({{"compute_bound_images_per_sec", json_number(r.compute)},
                    {"pipeline_images_per_sec", json_number(r.pipeline)},
                    {"ratio", json_number(r.ratio())},
                    {"compute_busy", json_number(r.compute_busy)},
                    {"bottleneck", r.bottleneck}});
  }
  print_json({{"bench", "train"},
              {"model", c.model},
              {"batch", c.batch},
              {"size", setup.size},
              {"precision", c.precision},
              {"channels_last", setup.channels_last},
              {"device", setup.device},
              {"data", setup.data},
              {"images", setup.images},
              {"seconds", json_number(c.seconds)},
              {"warmup", c.warmup},
              {"repeats", c.repeats},
              {"compute_bound_images_per_sec", json_number(result.compute_bound)},
              {"pipeline_images_per_sec", json_number(result.pipeline)},
              {"ratio", json_number(result.ratio())},
              {"compute_busy", json_number(result.compute_busy)},
              {"bottleneck", result.bottleneck},
              {"runs", std::move(runs)}});
}

void print_text_result(const Setup& setup, const bench::TrainingBenchResult& result) {
  std::vector<double> compute_rates, pipeline_rates;
  for (const bench::TrainingRound& r : result.rounds) {
    compute_rates.push_back(r.compute);
    pipeline_rates.push_back(r.pipeline);
  }
  std::printf("compute bound (synthetic batches on the device): %.1f images/s%s\n", result.compute_bound,
              median_of(compute_rates).c_str());
  std::printf(
      "pipeline (read -> decode + augment -> batch -> to-device -> train): %.1f images/s%s, "
      "train step busy %.0f%%\n",
      result.pipeline, median_of(pipeline_rates).c_str(), 100 * result.compute_busy);
  const bool step_limits = result.bottleneck == "train";
  std::printf("ratio pipeline / compute bound: %.3f, limited by %s%s\n", result.ratio(), result.bottleneck.c_str(),
              step_limits && setup.cpu ? " (the train step, which shares its cores with the input threads)"
              : step_limits            ? " (the train step)"
                                       : " (an input stage: the train step waits for it)");
}

constexpr const char* bench_train_summary =
    "Measures how much of the training step's speed the whole pipeline delivers. Two measurements\n"
    "of the same model on the same device, alternated --repeats times:\n"
    "  compute bound  train steps (forward, loss, backward, SGD) on a synthetic batch already on\n"
    "                 the device: no input pipeline at all;\n"
    "  pipeline       source -> read -> decode + augment -> batch -> train step on the files of\n"
    "                 --data, the scheduler on, as `stoke train` runs it.\n"
    "Each runs --warmup batches uncounted, then counts images for --seconds. Prints the medians'\n"
    "images/s and their ratio, pipeline / compute bound: the share of the compute bound the\n"
    "pipeline delivers (1.0: the input costs the step nothing), and the stage that limits it.\n"
    "On the CPU device both measurements use the same cores: in the pipeline run the input\n"
    "threads (read, decode, augment) take CPU time from the training step, which the ratio shows.\n"
    "With no --data: the built-in shapes dataset (written once to $STOKE_CACHE or ~/.cache/stoke).\n\n"
    "  stoke bench train --device cpu --repeats 3\n"
    "  stoke bench train --data imagenet/train --model resnet50 --batch 256 --precision bf16 --json";

// Each round's figures on stderr as they come.
std::function<void(int, const char*, const bench::TrainingRound&)> round_progress(const TrainBenchConfig& c) {
  return [&c](int round, const char* phase, const bench::TrainingRound& r) {
    if (std::string_view(phase) == "compute") {
      std::fprintf(stderr, "bench train: round %d of %d: compute bound for %.3g s ...", round + 1, c.repeats,
                   c.seconds);
    } else if (std::string_view(phase) == "pipeline") {
      std::fprintf(stderr, " %.1f images/s; pipeline ...", r.compute);
    } else {
      std::fprintf(stderr, " %.1f images/s (train busy %.0f%%, limited by %s): ratio %.3f\n", r.pipeline,
                   100 * r.compute_busy, r.bottleneck.c_str(), r.ratio());
    }
    std::fflush(stderr);
  };
}

}  // namespace

int bench_train(int argc, char** argv) {
  TrainBenchConfig c;
  CommandOptions cli("bench train", bench_train_summary);
  add_options(cli, c);
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (const std::string mistake = check(c); !mistake.empty()) return cli.usage_error(mistake);
  const gpu::DType dtype = c.dtype;
  const ChannelsLast channels_last = c.layout;

  // ---- data
  const fs::path data = c.data.empty() ? builtin_dataset_with_progress(c.json) / "train" : fs::path(c.data);
  const nodes::DatasetPtr dataset = open_dataset(data);
  if (dataset->size() < static_cast<std::size_t>(c.batch)) {
    throw std::runtime_error(data.string() + " has " + std::to_string(dataset->size()) +
                             " images, fewer than one batch of " + std::to_string(c.batch) + " (lower --batch)");
  }
  // A one-class folder still measures the pipeline; the classifier gets two outputs at least.
  const int classes = std::max<int>(2, static_cast<int>(dataset->classes().size()));

  // ---- compute: one model and trainer for both measurements, `stoke train`'s defaults
  const ComputeContext compute = make_compute(c.device, c.json ? nullptr : &std::cerr);
  nn::Backend& backend = *compute.backend;
  if (!backend.supports(dtype, gpu::TensorLayout::nchw)) {
    return cli.usage_error("--precision " + c.precision + " needs a CUDA device; " + backend.describe() +
                           " computes in fp32 only");
  }
  // `stoke train`'s recipe at a constant learning rate.
  const Recipe recipe{.model = c.model,
                      .batch = c.batch,
                      .size = c.size,
                      .builtin_data = c.data.empty(),
                      .schedule = nn::LrScheduleKind::constant,
                      .warmup = 0,
                      .precision = dtype,
                      .channels_last = channels_last,
                      .seed = c.seed,
                      .threads = c.threads,
                      .autotune = c.autotune == "on"};
  const auto model = make_model(recipe, classes, backend);
  nn::Trainer trainer(*model, backend, trainer_options(recipe, dataset->size()));
  // Images in the compute dtype and the model's layout, as the compute stage hands the converted
  // batches to the step: both measurements then run the same step.
  const int size = recipe.image_size();
  const gpu::TensorLayout layout = model->layout();
  const BatchTensors synthetic = synthetic_batch(backend, c.batch, size, classes, dtype, layout);
  if (!c.json) {
    std::fprintf(stderr, "bench train: %s (%lld parameters), batch %d, %dx%d, %s %s on %s; %zu images in %s\n",
                 c.model.c_str(), static_cast<long long>(nn::parameter_count(*model)), c.batch, size, size,
                 c.precision.c_str(), layout_name(layout).c_str(), backend.describe().c_str(), dataset->size(),
                 data.c_str());
  }

  const bench::TrainingBenchResult result = bench::measure_training(
      trainer, backend, synthetic, dataset, training_input(recipe), data.string(),
      {.repeats = c.repeats, .warmup = c.warmup, .seconds = c.seconds, .seed = c.seed, .progress = round_progress(c)});
  const Setup setup{.size = size,
                    .channels_last = layout == gpu::TensorLayout::nhwc,
                    .device = compute.device.str(),
                    .cpu = compute.device.is_cpu(),
                    .data = data.string(),
                    .images = dataset->size()};
  if (c.json) {
    print_json_result(c, setup, result);
  } else {
    print_text_result(setup, result);
  }
  return 0;
}

}  // namespace stoke::app
