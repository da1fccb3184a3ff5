// `stoke bench nn`: training throughput of a built-in model on synthetic data already on the
// device (no input pipeline): forward, loss, backward and an SGD step per batch, timed after a
// few warm-up steps. scripts/bench-nn.sh runs it against the same model in PyTorch, alternating
// the two, and prints the ratio.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/stream.hpp>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/layer_profile.hpp>
#include <stoke/nn/models.hpp>
#include <stoke/nn/trainer.hpp>
#include <stoke/train/compute.hpp>
#include <stoke/train/json.hpp>
#include <stoke/train/step_timing.hpp>
#include <string>

#include "cli.hpp"
#include "commands.hpp"
#include "median.hpp"
#include "progress.hpp"

namespace stoke::app {

using namespace stoke::train;  // NOLINT(google-build-using-namespace): the commands are glue over it
namespace {

namespace po = boost::program_options;

struct NnBenchConfig {
  std::string model = "small_cnn";
  std::string device = "auto";
  int batch = 64;
  int size = 32;
  int classes = 10;
  int warmup = 3;
  int steps = 20;
  std::string precision = "f32";
  bool channels_last = false;
  int profile = 0;
  bool json = false;
};

gpu::DType compute_dtype(const NnBenchConfig& c) {
  if (c.precision == "bf16") return gpu::DType::bf16;
  if (c.precision == "f16") return gpu::DType::f16;
  return gpu::DType::f32;
}

/// The profile's rows per step, slowest first, with their share of the profiled step.
void print_profile(const nn::LayerProfile& profile, int steps) {
  const double total = profile.total_seconds();
  std::printf("where a step goes (%d profiled steps, the device synchronized around each layer: %.2f ms per step)\n",
              steps, 1e3 * total / steps);
  std::printf("  %-24s %-9s %8s %10s %7s\n", "layer", "pass", "calls", "ms/step", "share");
  for (const auto& row : profile.rows()) {
    std::printf("  %-24s %-9s %8.0f %10.3f %6.1f%%\n", row.kind.c_str(), nn::to_string(row.pass).c_str(),
                static_cast<double>(row.calls) / steps, 1e3 * row.seconds / steps,
                total > 0 ? 100 * row.seconds / total : 0.0);
  }
}

constexpr const char* bench_nn_summary =
    "Measures training throughput of a built-in model on synthetic data already on the device:\n"
    "each step is forward, softmax cross-entropy, backward and an SGD (momentum) update, the\n"
    "work of `stoke train` without the input pipeline. Prints images/s over --steps steps after\n"
    "--warmup untimed ones, and the median per-step time. The peer in PyTorch is\n"
    "scripts/bench_nn_torch.py; scripts/bench-nn.sh runs both and prints the ratio.\n\n"
    "  stoke bench nn --model small_cnn --batch 64 --size 32 --device cpu\n"
    "  stoke bench nn --model resnet50 --batch 256 --size 224 --precision bf16 --channels-last";

void add_options(CommandOptions& cli, NnBenchConfig& c) {
  const std::string models = "the model: " + nn::model_names();
  cli.add()("model", po::value(&c.model)->default_value(c.model), models.c_str())(
      "device", po::value(&c.device)->default_value(c.device), "auto, cpu, cuda or cuda:N (auto: cuda:0 if usable)")(
      "batch", po::value(&c.batch)->default_value(c.batch), "images per step")(
      "size", po::value(&c.size)->default_value(c.size), "image side in pixels (square, 3 channels)")(
      "classes", po::value(&c.classes)->default_value(c.classes), "classes of the classifier")(
      "warmup", po::value(&c.warmup)->default_value(c.warmup), "untimed steps first")(
      "steps", po::value(&c.steps)->default_value(c.steps), "timed steps")(
      "precision", po::value(&c.precision)->default_value(c.precision),
      "f32, or bf16 / f16 mixed precision (f32 master weights; f16 with dynamic loss scaling); CUDA only")(
      "channels-last", po::bool_switch(&c.channels_last),
      "NHWC images and filters (tensor cores want them); CUDA only")(
      "profile", po::value(&c.profile)->default_value(c.profile),
      "after the timed steps, this many more with every layer timed on its own (the device synchronized\n"
      "around each, so they are slower): a table of where a step's time goes, slowest first")(
      "json", po::bool_switch(&c.json), "print one JSON line instead of the text (with --profile, a \"profile\" list)");
}

// A usage mistake the parser cannot see, or "" when there is none.
std::string check(const NnBenchConfig& c) {
  if (c.batch <= 0 || c.size < 8 || c.classes < 1)
    return "--batch and --classes must be positive and --size at least 8";
  if (c.warmup < 0 || c.steps < 1 || c.profile < 0) return "--warmup and --profile must be >= 0 and --steps >= 1";
  return choice_error("precision", c.precision, {"f32", "bf16", "f16"});
}

void print_json_result(const NnBenchConfig& c, const gpu::Device& device, const StepTiming& timing,
                       const nn::LayerProfile& profile) {
  const double images_per_sec = timing.images_per_sec();
  const double last_loss = timing.last_loss;
  auto report = nlohmann::ordered_json{{"bench", "nn"},
                                       {"model", c.model},
                                       {"device", device.str()},
                                       {"batch", c.batch},
                                       {"size", c.size},
                                       {"precision", c.precision},
                                       {"channels_last", c.channels_last},
                                       {"steps", c.steps},
                                       {"images_per_sec", json_number(images_per_sec)},
                                       {"median_step_ms", json_number(median(timing.step_ms))},
                                       {"last_loss", json_number(last_loss)}};
  if (c.profile > 0) {
    auto rows = nlohmann::ordered_json::array();
    for (const auto& row : profile.rows()) {
      rows.push_back({{"kind", row.kind},
                      {"pass", nn::to_string(row.pass)},
                      {"calls_per_step", json_number(static_cast<double>(row.calls) / c.profile)},
                      {"ms_per_step", json_number(1e3 * row.seconds / c.profile)}});
    }
    report["profile"] = rows;
  }
  print_json(report);
}

}  // namespace

int bench_nn(int argc, char** argv) {
  NnBenchConfig c;
  CommandOptions cli("bench nn", bench_nn_summary);
  add_options(cli, c);
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (const std::string mistake = check(c); !mistake.empty()) return cli.usage_error(mistake);

  const ComputeContext machine = make_compute(c.device, &std::cerr);
  const gpu::Device device = machine.device;
  const std::unique_ptr<nn::Backend>& backend = machine.backend;
  if (!backend->supports(compute_dtype(c), c.channels_last ? gpu::TensorLayout::nhwc : gpu::TensorLayout::nchw)) {
    return cli.usage_error("--precision " + c.precision + (c.channels_last ? " --channels-last" : "") +
                           " needs a CUDA device; " + backend->describe() + " computes in f32 only");
  }
  auto model = nn::make_model(c.model, {.classes = c.classes, .seed = 1});
  model->to(device, backend->stream());
  if (c.channels_last) model->to_layout(gpu::TensorLayout::nhwc, backend->stream());
  nn::Trainer trainer(*model, *backend,
                      {.sgd = {.momentum = 0.9f, .weight_decay = 5e-4f},
                       .schedule = {.kind = nn::LrScheduleKind::constant, .base_lr = 0.01f},
                       .compute = compute_dtype(c)});
  // The images come in the compute dtype and layout, as stoke's convert stage delivers them.
  const BatchTensors batch = synthetic_batch(*backend, c.batch, c.size, c.classes, compute_dtype(c),
                                             c.channels_last ? gpu::TensorLayout::nhwc : gpu::TensorLayout::nchw);
  if (!c.json) {
    std::fprintf(stderr, "bench nn: %s (%lld parameters), batch %d, %dx%d, on %s\n", c.model.c_str(),
                 static_cast<long long>(nn::parameter_count(*model)), c.batch, c.size, c.size,
                 backend->describe().c_str());
  }
  const StepTiming timing = time_train_steps(trainer, *backend, batch, {.warmup = c.warmup, .steps = c.steps});
  const double images_per_sec = timing.images_per_sec();
  const double last_loss = timing.last_loss;
  nn::LayerProfile profile;
  if (c.profile > 0) {
    trainer.set_profile(&profile);
    for (int i = 0; i < c.profile; ++i) trainer.train_batch(batch.images, batch.labels);
    trainer.set_profile(nullptr);
  }
  if (c.json) {
    print_json_result(c, device, timing, profile);
  } else {
    std::printf("%s training (%s%s), batch %d, %dx%d on %s: %.1f images/s (median step %.2f ms, loss %.4f)\n",
                c.model.c_str(), c.precision.c_str(), c.channels_last ? ", channels-last" : "", c.batch, c.size, c.size,
                device.str().c_str(), images_per_sec, median(timing.step_ms), last_loss);
    if (c.profile > 0) print_profile(profile, c.profile);
  }
  return 0;
}

}  // namespace stoke::app
