// `stoke train`: trains a built-in model on an image dataset through the whole graph -- source ->
// read -> decode + augment -> batch -> train step (forward, loss, backward, SGD) -- with the
// scheduler keeping the train step fed, evaluates on the validation split after every epoch, and
// checkpoints. With no --data it trains the small CNN on the built-in shapes dataset, written
// once into a cache folder: the quickstart's main job.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/nvml_monitor.hpp>
#include <stoke/gpu/stream.hpp>
#include <stoke/graph/signal.hpp>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/models.hpp>
#include <stoke/nn/trainer.hpp>
#include <stoke/nodes/plugin.hpp>
#include <stoke/nodes/shapes.hpp>
#include <string>
#include <vector>

// GCC 12 reports a false null dereference inside Boost.Program_options' typed_value<std::string>.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include "cli.hpp"
#pragma GCC diagnostic pop
#include <stoke/train/builtin.hpp>
#include <stoke/train/compute.hpp>
#include <stoke/train/epoch.hpp>
#include <stoke/train/input.hpp>
#include <stoke/train/metrics.hpp>
#include <stoke/train/model_card.hpp>
#include <stoke/train/report.hpp>

#include "commands.hpp"
#include "json.hpp"
#include "progress.hpp"

namespace stoke::app {

using namespace stoke::train;  // NOLINT(google-build-using-namespace): the commands are glue over it
namespace {

namespace fs = std::filesystem;
namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

struct TrainConfig {
  std::string data;  // empty: the built-in shapes dataset
  std::string val;   // empty: DATA/../val when DATA ends in "train", else none
  std::string format = "auto";
  std::string on_error = "skip";
  std::string model = "small_cnn";
  int epochs = 0;  // 0: 6 for the built-in dataset, else 10
  int batch = 64;
  int size = 0;  // 0: 32 for small_cnn and mobilenet, 224 for the ResNets
  float lr = 0.05f;
  std::string schedule = "cosine";
  double warmup = 1;  // epochs
  float momentum = 0.9f;
  float weight_decay = 5e-4f;
  float label_smoothing = 0.05f;
  std::string precision = "fp32";
  std::string device = "auto";
  int threads = 0;
  std::string autotune = "on";
  int accumulate = 1;
  std::string checkpoint;  // a folder; empty: none
  std::string resume;      // a checkpoint file
  std::vector<std::string> transforms;
  std::vector<std::string> plugins;
  std::uint64_t seed = 0;
  bool deterministic = false;
  std::string trace;   // a Chrome trace of the first training epoch
  std::string report;  // an HTML page of the run
  std::string config;  // a file of these options
  bool json = false;
};

// The checkpoint's record of how far into its epoch the run got (items of the epoch's order), so
// that a run interrupted mid-epoch resumes at the next batch rather than the epoch's start.
constexpr const char* position_key = "epoch_position";

// ---- progress

std::string clock_text(double seconds) {
  const auto s = static_cast<long long>(std::max(0.0, seconds) + 0.5);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%lld:%02lld", s / 60, s % 60);
  }
  return text;
}

// The epoch's progress on stderr: redrawn in place on a terminal, a line every 10 s otherwise
// (a log file or CI).
//   epoch 2/6 [#########-----------] 45%  22528/50000  1512 img/s  loss 0.43  lr 0.041  ETA 0:18  CPU busy 99% (limit:
//   train)
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled) : enabled_(enabled), tty_(::isatty(STDERR_FILENO) == 1) {}

  void show(long long epoch, int epochs, const EpochTotals& t, std::int64_t epoch_images, float lr,
            const char* busy_name, double busy, const std::string& limit) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (!tty_ && now - last_line_ < std::chrono::seconds(10)) return;
    last_line_ = now;
    const double done =
        epoch_images > 0 ? std::min(1.0, static_cast<double>(t.images) / static_cast<double>(epoch_images)) : 0;
    const double rate = t.seconds > 0 ? static_cast<double>(t.images) / t.seconds : 0;
    const double eta = rate > 0 ? static_cast<double>(epoch_images - t.images) / rate : 0;
    constexpr int width = 20;
    std::string bar(width, '-');
    std::fill_n(bar.begin(), static_cast<int>(done * width), '#');
    std::fprintf(
        stderr,
        "%sepoch %lld/%d [%s] %3.0f%%  %lld/%lld  %.0f img/s  loss %.4f  lr %.4g  ETA %s  %s busy %.0f%% (limit: %s)%s",
        tty_ ? "\r" : "", epoch, epochs, bar.c_str(), 100 * done, static_cast<long long>(t.images),
        static_cast<long long>(epoch_images), rate, t.images > 0 ? t.loss_sum / static_cast<double>(t.images) : 0.0,
        static_cast<double>(lr), clock_text(eta).c_str(), busy_name, 100 * busy, limit.empty() ? "-" : limit.c_str(),
        tty_ ? "\x1b[K" : "\n");
    std::fflush(stderr);
    drawn_ = tty_;
  }

  // Clears the line drawn in place, before a result line.
  void clear() {
    if (drawn_) std::fprintf(stderr, "\r\x1b[K");
    drawn_ = false;
  }

 private:
  bool enabled_;
  bool tty_;
  bool drawn_ = false;
  Clock::time_point last_line_{};
};

// For each dataset index, its position in an epoch's visiting order.
std::vector<std::uint32_t> positions_in(const nodes::EpochOrder& order) {
  const std::vector<std::uint64_t> indices = order.indices(0);
  std::vector<std::uint32_t> position(indices.size() == 0 ? 0 : *std::max_element(indices.begin(), indices.end()) + 1);
  for (std::size_t i = 0; i < indices.size(); ++i) position[indices[i]] = static_cast<std::uint32_t>(i);
  return position;
}

// 0.05 rather than std::to_string's 0.050000.
std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

double ratio(std::int64_t part, std::int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0;
}

}  // namespace

int train(int argc, char** argv) {
  TrainConfig c;
  CommandOptions cli("train",
                     "Trains a built-in image classifier through the whole graph: read -> decode + augment ->\n"
                     "batch -> train step (forward, softmax cross-entropy, backward, SGD with momentum), the\n"
                     "scheduler moving threads to whichever input stage keeps the train step waiting. Evaluates\n"
                     "on the validation split after each epoch (top-1, top-5) and writes a checkpoint\n"
                     "(safetensors, with the class names: `stoke classify` and `stoke evaluate` read it) per epoch.\n"
                     "With no --data: the built-in shapes dataset (10 classes, 32 px; written once to\n"
                     "$STOKE_CACHE or ~/.cache/stoke) and the small CNN, 6 epochs: over 90% validation accuracy\n"
                     "in a few minutes on 2 cores.\n\n"
                     "Ctrl-C finishes the current step, writes last.safetensors and exits 130; --resume then\n"
                     "continues at the next batch with the same learning rate and random streams, so the result\n"
                     "matches an uninterrupted run. A second Ctrl-C exits at once.\n\n"
                     "  stoke train                                    # the quickstart's job\n"
                     "  stoke train --data imagenet/train --val imagenet/val --model resnet50 --size 224 \\\n"
                     "              --batch 256 --lr 0.1 --epochs 90 --precision bf16 --checkpoint runs/r50\n"
                     "  stoke train --config runs/r50.conf             # the same, options in a file");
  std::string models;
  for (const nn::ModelInfo& info : nn::model_catalog()) models += (models.empty() ? "" : ", ") + std::string(info.name);
  cli.add()("data", po::value(&c.data),
            "training images: an ImageFolder, a file list, CIFAR batches or a .stoke shard")(
      "val", po::value(&c.val), "validation images (default: DATA's sibling 'val' when DATA is a 'train' folder)")(
      "format", po::value(&c.format)->default_value(c.format), "auto, folder, filelist, cifar or packed")(
      "on-error", po::value(&c.on_error)->default_value(c.on_error),
      "an unreadable or corrupt image: skip (count it, list it at the end) or fail (stop the run)")(
      "model", po::value(&c.model)->default_value(c.model), ("the model: " + models).c_str())(
      "epochs", po::value(&c.epochs)->default_value(c.epochs),
      "passes over the training data (0: 6 for the built-in dataset, else 10)")(
      "batch", po::value(&c.batch)->default_value(c.batch), "images per batch")(
      "size", po::value(&c.size)->default_value(c.size),
      "image side in pixels (0: 32 for small_cnn/mobilenet, else 224)")("lr", po::value(&c.lr)->default_value(c.lr),
                                                                        "learning rate after the warmup")(
      "schedule", po::value(&c.schedule)->default_value(c.schedule),
      "cosine, step (x0.1 every 30% of the run) or constant")("warmup", po::value(&c.warmup)->default_value(c.warmup),
                                                              "epochs of linear warmup")(
      "momentum", po::value(&c.momentum)->default_value(c.momentum), "SGD momentum (Nesterov)")(
      "weight-decay", po::value(&c.weight_decay)->default_value(c.weight_decay), "on weights, not biases or BN")(
      "label-smoothing", po::value(&c.label_smoothing)->default_value(c.label_smoothing), "in [0, 1)")(
      "precision", po::value(&c.precision)->default_value(c.precision), "fp32, or bf16 / fp16 mixed precision (CUDA)")(
      "device", po::value(&c.device)->default_value(c.device), "auto, cpu, cuda or cuda:N")(
      "threads", po::value(&c.threads)->default_value(c.threads), "input threads (0: the scheduler's choice)")(
      "autotune", po::value(&c.autotune)->default_value(c.autotune), "on or off: the scheduler moves input threads")(
      "accumulate", po::value(&c.accumulate)->default_value(c.accumulate), "batches per optimizer step")(
      "checkpoint", po::value(&c.checkpoint), "folder for epoch_N.safetensors and last.safetensors")(
      "resume", po::value(&c.resume), "a checkpoint to continue from (its epoch, position, LR and weights)")(
      "transform", po::value(&c.transforms)->composing(),
      "a training transform spec, repeatable, in order (default: random_resized_crop size=S scale=0.35:1,\n"
      "random_horizontal_flip, normalize; for the built-in dataset no crop); `stoke bench pipeline\n"
      "--list-transforms` lists them")("plugin", po::value(&c.plugins)->composing(),
                                       "a shared library of extra transforms (see examples/plugin), repeatable")(
      "seed", po::value(&c.seed)->default_value(c.seed), "shuffling, augmentation, initial weights")(
      "deterministic", po::bool_switch(&c.deterministic),
      "bit-identical weights for a seed whatever --threads (the CPU device always is; CUDA is refused)")(
      "trace", po::value(&c.trace), "write a Chrome trace (Perfetto, chrome://tracing) of the first training epoch")(
      "report", po::value(&c.report),
      "write an HTML page of the run (self-contained): throughput and busy % over time, per-stage\n"
      "busy/starved/blocked, the scheduler's moves, loss and accuracy per epoch, skipped files;\n"
      "rewritten after every epoch")("config", po::value(&c.config),
                                     "read options from this file too: 'key = value' lines (the command line wins)")(
      "json", po::bool_switch(&c.json), "one JSON object per epoch and a final one on stdout");
  cli.config_file_option("config");
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (c.epochs < 0 || c.batch < 1 || c.accumulate < 1) {
    return cli.usage_error("--epochs must be >= 0 (0: the default), --batch and --accumulate at least 1");
  }
  if (c.epochs == 0) c.epochs = c.data.empty() ? 6 : 10;
  gpu::DType compute{};
  nn::LrScheduleKind schedule_kind{};
  try {
    compute = compute_dtype(c.precision);
    schedule_kind = nn::parse_lr_schedule(c.schedule);
    if (c.format != "auto" && c.format != "folder" && c.format != "filelist" && c.format != "cifar" &&
        c.format != "packed") {
      throw std::invalid_argument("--format must be auto, folder, filelist, cifar or packed (got '" + c.format + "')");
    }
    if (c.data.empty() && c.format != "auto") throw std::invalid_argument("--format needs --data");
  } catch (const std::invalid_argument& e) {
    return cli.usage_error(e.what());
  }
  if (c.on_error != "skip" && c.on_error != "fail") {
    return cli.usage_error("--on-error must be skip or fail (got '" + c.on_error + "')");
  }
  if (c.autotune != "on" && c.autotune != "off") {
    return cli.usage_error("--autotune must be on or off (got '" + c.autotune + "')");
  }
  if (!c.transforms.empty() && c.transforms.back().rfind("normalize", 0) != 0) {
    return cli.usage_error("the last --transform must be normalize (the model takes normalized float images); got '" +
                           c.transforms.back() + "'");
  }
  for (const std::string& plugin : c.plugins) nodes::load_plugin(plugin, nodes::Registry::builtin());

  // ---- data
  fs::path train_path = c.data;
  fs::path val_path = c.val;
  if (c.data.empty()) {
    const fs::path root = builtin_dataset_with_progress(c.json);
    train_path = root / "train";
    if (val_path.empty()) val_path = root / "val";
  } else if (val_path.empty() && train_path.filename() == "train" &&
             fs::is_directory(train_path.parent_path() / "val")) {
    val_path = train_path.parent_path() / "val";
  }
  const nodes::DatasetPtr train_set = open_dataset(train_path, c.format);
  const nodes::DatasetPtr val_set = val_path.empty() ? nullptr : open_dataset(val_path, c.format);
  if (train_set->size() < static_cast<std::size_t>(c.batch)) {
    throw std::runtime_error(train_path.string() + " has " + std::to_string(train_set->size()) +
                             " images, fewer than one batch of " + std::to_string(c.batch) + " (lower --batch)");
  }
  const int classes = static_cast<int>(train_set->classes().size());
  if (classes < 2) {
    throw std::runtime_error(train_path.string() + " has " + std::to_string(classes) +
                             " class; a classifier needs at least two (one subfolder per class)");
  }
  if (val_set && val_set->classes() != train_set->classes()) {
    throw std::runtime_error(val_path.string() + " has other classes than " + train_path.string() +
                             " (the same subfolder names are needed in both)");
  }

  // ---- compute
  const ComputeContext machine = make_compute(c.device, c.json ? nullptr : &std::cerr);
  const gpu::Device device = machine.device;
  const std::unique_ptr<nn::Backend>& backend = machine.backend;
  if (c.deterministic && !device.is_cpu()) {
    return cli.usage_error(
        "--deterministic needs the CPU device (cuDNN's searched algorithms are not bit-reproducible); "
        "add --device cpu");
  }
  if (!backend->supports(compute, gpu::TensorLayout::nchw)) {
    return cli.usage_error("--precision " + c.precision + " needs a CUDA device; " + backend->describe() +
                           " computes in fp32 only");
  }
  const gpu::NvmlMonitor gpu_monitor(device, std::chrono::milliseconds(500));
  auto model = nn::make_model(c.model, {.classes = classes, .seed = c.seed});
  model->to(device, backend->stream());

  const int size = c.size > 0 ? c.size : default_image_size(c.model);
  const auto batches_per_epoch = static_cast<std::int64_t>(train_set->size() / static_cast<std::size_t>(c.batch));
  const std::int64_t steps_per_epoch = std::max<std::int64_t>(1, batches_per_epoch / c.accumulate);
  const std::int64_t total_steps = steps_per_epoch * c.epochs;
  const auto warmup_steps = std::min<std::int64_t>(
      static_cast<std::int64_t>(c.warmup * static_cast<double>(steps_per_epoch)), total_steps - 1);
  nn::Trainer trainer(*model, *backend,
                      {.sgd = {.momentum = c.momentum, .weight_decay = c.weight_decay, .nesterov = c.momentum > 0},
                       .schedule = {.kind = schedule_kind,
                                    .base_lr = c.lr,
                                    .total_steps = total_steps,
                                    .warmup_steps = std::max<std::int64_t>(warmup_steps, 0),
                                    .warmup_start = 0.0f,
                                    .step_size = std::max<std::int64_t>(1, total_steps * 3 / 10),
                                    .gamma = 0.1f,
                                    .min_lr = 0.0f},
                       .label_smoothing = c.label_smoothing,
                       .accumulation = c.accumulate,
                       .seed = c.seed,
                       .compute = compute,
                       .loss_scale = {}});
  std::size_t resume_position = 0;  // items of the resumed epoch's order already trained on
  if (!c.resume.empty()) {
    trainer.load(c.resume);
    if (const auto it = trainer.metadata().find(position_key); it != trainer.metadata().end()) {
      resume_position = static_cast<std::size_t>(std::strtoull(it->second.c_str(), nullptr, 10));
    }
    if (!c.json) {
      std::fprintf(stderr, "stoke train: resumed from %s at epoch %lld, step %lld%s\n", c.resume.c_str(),
                   static_cast<long long>(trainer.epoch() + 1), static_cast<long long>(trainer.step()),
                   resume_position > 0 ? (", image " + std::to_string(resume_position) + " of the epoch").c_str() : "");
    }
  }
  if (!c.checkpoint.empty()) fs::create_directories(c.checkpoint);
  if (const fs::path report_folder = fs::path(c.report).parent_path(); !report_folder.empty()) {
    fs::create_directories(report_folder);
  }
  if (!c.json) {
    std::fprintf(stderr,
                 "stoke train: %s (%lld parameters, %d classes) on %s; %zu training images%s, %dx%d, batch %d\n",
                 c.model.c_str(), static_cast<long long>(nn::parameter_count(*model)), classes,
                 backend->describe().c_str(), train_set->size(),
                 val_set ? (", " + std::to_string(val_set->size()) + " validation").c_str() : "", size, size, c.batch);
  }

  const graph::SignalStop signals(2);  // Ctrl-C: the step finishes, a checkpoint is written; again: exit now
  InputConfig train_input;
  train_input.batch_size = static_cast<std::size_t>(c.batch);
  train_input.size = size;
  // The default augmentation: random crops for real photos; the shapes dataset's images are
  // already framed at their size, and a crop would cut the shape that is the label.
  train_input.transforms = c.transforms.empty() ? default_train_transforms(size, c.data.empty()) : c.transforms;
  train_input.threads = c.threads;
  train_input.on_error = c.on_error == "fail" ? graph::OnError::fail : graph::OnError::skip;
  train_input.autotune = c.autotune == "on";
  train_input.tuning.target = "train";
  train_input.drop_last = true;
  InputConfig val_input = train_input;
  val_input.transforms = {"resize size=" + std::to_string(size), "center_crop size=" + std::to_string(size),
                          "normalize"};
  val_input.tuning.target = "evaluate";
  val_input.shuffle = false;
  val_input.drop_last = false;
  // What `stoke classify` and `stoke evaluate` need to use a checkpoint on their own.
  auto metadata = to_metadata(
      {.model = c.model, .image_size = size, .classes = train_set->classes(), .eval_transforms = val_input.transforms});

  ProgressLine progress_line(!c.json);
  const auto run_start = Clock::now();
  const auto now = [&] { return std::chrono::duration<double>(Clock::now() - run_start).count(); };
  std::optional<RunRecorder> recorder;
  if (!c.report.empty()) recorder.emplace();
  const std::vector<std::pair<std::string, std::string>> report_settings = {
      {"data", train_path.string()},
      {"validation", val_path.empty() ? "none" : val_path.string()},
      {"model", c.model + " (" + std::to_string(nn::parameter_count(*model)) + " parameters)"},
      {"device", backend->describe()},
      {"precision", c.precision},
      {"epochs", std::to_string(c.epochs)},
      {"batch",
       std::to_string(c.batch) + (c.accumulate > 1 ? " x " + std::to_string(c.accumulate) + " accumulated" : "")},
      {"image size", std::to_string(size)},
      {"learning rate", number_text(c.lr) + ", " + c.schedule + ", warmup " + number_text(c.warmup) + " epochs"},
      {"input threads", c.threads > 0 ? std::to_string(c.threads) : "the scheduler's choice"},
      {"autotune", c.autotune},
      {"seed", std::to_string(c.seed)}};
  // The GPU's utilization when NVML reports it (nothing on the CPU device).
  const auto gpu_busy = [&]() -> std::optional<double> {
    if (const auto stats = gpu_monitor.stats(); stats.last) return stats.last->utilization_pct / 100.0;
    return std::nullopt;
  };
  const char* busy_name = device.is_cpu() ? "CPU compute" : "GPU";
  std::string last_checkpoint;
  bool interrupted = false;
  double val_top1 = 0, val_top5 = 0, best_top1 = 0, seconds = 0;
  std::int64_t images = 0;
  std::uint64_t skipped = 0;
  std::vector<SkippedFile> skipped_files;  // the first ones of the whole run
  constexpr std::size_t max_listed_skips = 100;
  const std::int64_t first_epoch = trainer.epoch();  // the loop moves trainer.epoch() on
  for (std::int64_t epoch = first_epoch; epoch < c.epochs && !interrupted; ++epoch) {
    train_input.seed = c.seed * 1000003u + static_cast<std::uint64_t>(epoch);
    train_input.start = epoch == first_epoch ? resume_position : 0;
    train_input.trace_file = epoch == first_epoch && !c.trace.empty() ? fs::path(c.trace) : fs::path();
    // Where the run is in the epoch's order after the last full optimizer step: the resume point.
    const std::vector<std::uint32_t> position_of = positions_in(
        nodes::EpochOrder(train_set->size(), {.shuffle = true, .seed = train_input.seed, .rank = 0, .world = 1}));
    std::size_t position = train_input.start;
    const std::int64_t epoch_images =
        static_cast<std::int64_t>((train_set->size() - std::min(train_set->size(), train_input.start)) /
                                  static_cast<std::size_t>(c.batch) * static_cast<std::size_t>(c.batch));
    const auto progress = [&](const EpochTotals& t, const graph::Pipeline& pipe) {
      const std::vector<graph::StageStats> stages = pipe.stats();
      const Limit limit = find_limit(stages, "train", t.seconds);
      const std::optional<double> gpu = gpu_busy();
      progress_line.show(static_cast<long long>(epoch + 1), c.epochs, t, epoch_images, trainer.lr(), busy_name,
                         gpu.value_or(limit.compute_busy), limit.stage);
      if (recorder) recorder->sample(now(), t.images, stages, gpu);
    };
    const auto record_sample = [&](const EpochTotals& t, const graph::Pipeline& pipe) {
      if (recorder) recorder->sample(now(), t.images, pipe.stats(), gpu_busy());
    };
    if (recorder) recorder->begin_phase(now(), static_cast<int>(epoch + 1), "train");
    const EpochTotals train_totals = run_epoch(
        train_set, train_input, "train", *backend,
        [&](const BatchTensors& t) {
          const std::int64_t step = trainer.step();
          StepResult r{trainer.train_batch(t.images, t.labels)};
          if (trainer.step() != step && !t.indices.empty()) position = position_of[t.indices.back()] + 1u;
          return r;
        },
        progress);
    progress_line.clear();
    if (recorder) recorder->end_phase(now(), train_totals.images, train_totals.report);
    const bool epoch_done = !train_totals.stopped;

    EpochTotals val_totals;
    if (val_set && epoch_done) {
      if (recorder) recorder->begin_phase(now(), static_cast<int>(epoch + 1), "evaluate");
      val_totals = run_epoch(
          val_set, val_input, "evaluate", *backend,
          [&](const BatchTensors& t) {
            nn::Tensor logits;
            StepResult r{trainer.evaluate_batch(t.images, t.labels, &logits)};
            r.correct_top5 = top_k_correct(logits, t.labels, 5, *backend);
            return r;
          },
          record_sample);
      if (recorder) recorder->end_phase(now(), val_totals.images, val_totals.report);
    }
    interrupted = train_totals.stopped || val_totals.stopped;
    trainer.set_epoch(epoch_done ? epoch + 1 : epoch);
    metadata[position_key] = std::to_string(epoch_done ? 0 : position);
    trainer.set_metadata(metadata);
    if (!c.checkpoint.empty()) {
      // Both files are written atomically (Trainer::save: temporary file, flush, rename).
      const fs::path last = fs::path(c.checkpoint) / "last.safetensors";
      trainer.save(last);
      if (epoch_done) trainer.save(fs::path(c.checkpoint) / ("epoch_" + std::to_string(epoch + 1) + ".safetensors"));
      last_checkpoint = last.string();
    }

    const double train_loss =
        train_totals.images > 0 ? train_totals.loss_sum / static_cast<double>(train_totals.images) : 0;
    const bool validated = val_totals.images > 0 && !val_totals.stopped;
    if (validated) {
      val_top1 = ratio(val_totals.correct, val_totals.images);
      val_top5 = ratio(val_totals.correct_top5, val_totals.images);
      best_top1 = std::max(best_top1, val_top1);
    }
    const double images_per_sec =
        train_totals.seconds > 0 ? static_cast<double>(train_totals.images) / train_totals.seconds : 0;
    images += train_totals.images;
    seconds += train_totals.seconds + val_totals.seconds;
    skipped += train_totals.skipped + val_totals.skipped;
    if (recorder) {
      recorder->epoch({.epoch = static_cast<int>(epoch + 1),
                       .train_loss = train_loss,
                       .train_top1 = ratio(train_totals.correct, train_totals.images),
                       .val_top1 = validated ? std::optional(val_top1) : std::nullopt,
                       .val_top5 = validated ? std::optional(val_top5) : std::nullopt,
                       .images_per_sec = images_per_sec,
                       .compute_busy = train_totals.compute_busy,
                       .skipped = train_totals.skipped + val_totals.skipped});
      recorder->write_html(c.report, "stoke train: " + c.model, report_settings);
    }
    for (const EpochTotals* totals : std::initializer_list<const EpochTotals*>{&train_totals, &val_totals}) {
      for (const SkippedFile& f : totals->skipped_files) {
        if (skipped_files.size() < max_listed_skips) skipped_files.push_back(f);
      }
    }
    if (c.json) {
      Json j;
      j.field("epoch", static_cast<int>(epoch + 1));
      j.field("train_loss", train_loss);
      j.field("train_top1", ratio(train_totals.correct, train_totals.images));
      if (validated) {
        j.field("val_top1", val_top1);
        j.field("val_top5", val_top5);
      } else {
        j.null_field("val_top1");
        j.null_field("val_top5");
      }
      j.field("images_per_sec", images_per_sec);
      j.field("compute_busy", train_totals.compute_busy);
      j.field("bottleneck", train_totals.bottleneck);
      j.field("skipped", static_cast<std::uint64_t>(train_totals.skipped + val_totals.skipped));
      j.field("checkpoint", last_checkpoint);
      j.field("interrupted", interrupted);
      std::printf("%s\n", j.str().c_str());
    } else {
      char val_text[48] = "none";  // no validation split, or the epoch was interrupted before it
      if (validated) std::snprintf(val_text, sizeof val_text, "%.3f (top-5 %.3f)", val_top1, val_top5);
      std::printf("epoch %lld/%d: train loss %.4f, val top-1 %s, %.0f images/s, %s busy %.0f%% (limited by %s)%s\n",
                  static_cast<long long>(epoch + 1), c.epochs, train_loss, val_text, images_per_sec, busy_name,
                  100 * train_totals.compute_busy,
                  train_totals.bottleneck.empty() ? "-" : train_totals.bottleneck.c_str(),
                  interrupted ? " (interrupted)" : "");
    }
    std::fflush(stdout);
  }

  // ---- the run's summary
  if (c.json) {
    Json j;
    j.field("final", true);
    j.field("epochs", static_cast<int>(trainer.epoch()));
    j.field("val_top1", val_top1);
    j.field("val_top5", val_top5);
    j.field("best_val_top1", best_top1);
    j.field("images", static_cast<std::uint64_t>(images));
    j.field("seconds", seconds);
    j.field("images_per_sec", seconds > 0 ? static_cast<double>(images) / seconds : 0.0);
    j.field("skipped", skipped);
    j.begin_array("skipped_files");
    for (const SkippedFile& f : skipped_files) {
      j.begin_object();
      j.field("file", f.file);
      j.field("reason", f.reason);
      j.end_object();
    }
    j.end_array();
    j.field("checkpoint", last_checkpoint);
    j.field("interrupted", interrupted);
    std::printf("%s\n", j.str().c_str());
  }
  if (skipped > 0) {
    std::fprintf(
        stderr, "stoke train: %llu image%s skipped (unreadable or corrupt)%s\n",
        static_cast<unsigned long long>(skipped), skipped == 1 ? "" : "s",
        skipped > skipped_files.size() ? (", the first " + std::to_string(skipped_files.size()) + ":").c_str() : ":");
    for (const SkippedFile& f : skipped_files) std::fprintf(stderr, "  %s: %s\n", f.file.c_str(), f.reason.c_str());
  }
  if (interrupted) {
    std::fprintf(stderr, "stoke train: interrupted; %s\n",
                 last_checkpoint.empty() ? "no --checkpoint folder, nothing saved"
                                         : ("resume with --resume " + last_checkpoint).c_str());
    return 130;
  }
  return 0;
}

}  // namespace stoke::app
