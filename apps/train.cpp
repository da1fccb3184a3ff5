// `stoke train`: trains a built-in model on an image dataset through the whole graph -- source ->
// read -> decode + augment -> batch -> train step (forward, loss, backward, SGD) -- with the
// scheduler keeping the train step fed, evaluates on the validation split after every epoch, and
// checkpoints. With no --data it trains the small CNN on the built-in shapes dataset, written
// once into a cache folder: the quickstart's main job.
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
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/nn/backend.hpp>
#include <stoke/gpu/nn/models.hpp>
#include <stoke/gpu/nn/trainer.hpp>
#include <stoke/gpu/stream.hpp>
#include <stoke/graph/signal.hpp>
#include <stoke/nodes/shapes.hpp>
#include <string>
#include <vector>

// GCC 12 reports a false null dereference inside Boost.Program_options' typed_value<std::string>.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include "cli.hpp"
#pragma GCC diagnostic pop
#include "commands.hpp"
#include "input_pipeline.hpp"
#include "json.hpp"
#include "training.hpp"

namespace stoke::app {
namespace {

namespace fs = std::filesystem;
namespace nn = gpu::nn;
namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

struct TrainConfig {
  std::string data;  // empty: the built-in shapes dataset
  std::string val;   // empty: DATA/../val when DATA ends in "train", else none
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
  std::uint64_t seed = 0;
  bool json = false;
};

}  // namespace

int train(int argc, char** argv) {
  TrainConfig c;
  CommandOptions cli("train",
                     "Trains a built-in image classifier through the whole graph: read -> decode + augment ->\n"
                     "batch -> train step (forward, softmax cross-entropy, backward, SGD with momentum), the\n"
                     "scheduler moving threads to whichever input stage keeps the train step waiting. Evaluates\n"
                     "on the validation split after each epoch and writes a checkpoint (safetensors) per epoch.\n"
                     "With no --data: the built-in shapes dataset (10 classes, 32 px; written once to\n"
                     "$STOKE_CACHE or ~/.cache/stoke) and the small CNN, 6 epochs: over 90% validation accuracy\n"
                     "in a few minutes on 2 cores.\n\n"
                     "  stoke train                                    # the quickstart's job\n"
                     "  stoke train --data imagenet/train --val imagenet/val --model resnet50 --size 224 \\\n"
                     "              --batch 256 --lr 0.1 --epochs 90 --precision bf16 --checkpoint runs/r50");
  std::string models;
  for (const nn::ModelInfo& info : nn::model_catalog()) models += (models.empty() ? "" : ", ") + std::string(info.name);
  cli.add()("data", po::value(&c.data), "training images: an ImageFolder, a file list, CIFAR batches or a .stoke shard")(
      "val", po::value(&c.val), "validation images (default: DATA's sibling 'val' when DATA is a 'train' folder)")(
      "model", po::value(&c.model)->default_value(c.model), ("the model: " + models).c_str())(
      "epochs", po::value(&c.epochs)->default_value(c.epochs), "passes over the training data (0: 6 for the built-in dataset, else 10)")(
      "batch", po::value(&c.batch)->default_value(c.batch), "images per batch")(
      "size", po::value(&c.size)->default_value(c.size), "image side in pixels (0: 32 for small_cnn/mobilenet, else 224)")(
      "lr", po::value(&c.lr)->default_value(c.lr), "learning rate after the warmup")(
      "schedule", po::value(&c.schedule)->default_value(c.schedule), "cosine, step (x0.1 every 30% of the run) or constant")(
      "warmup", po::value(&c.warmup)->default_value(c.warmup), "epochs of linear warmup")(
      "momentum", po::value(&c.momentum)->default_value(c.momentum), "SGD momentum (Nesterov)")(
      "weight-decay", po::value(&c.weight_decay)->default_value(c.weight_decay), "on weights, not biases or BN")(
      "label-smoothing", po::value(&c.label_smoothing)->default_value(c.label_smoothing), "in [0, 1)")(
      "precision", po::value(&c.precision)->default_value(c.precision), "fp32, or bf16 / fp16 mixed precision (CUDA)")(
      "device", po::value(&c.device)->default_value(c.device), "auto, cpu, cuda or cuda:N")(
      "threads", po::value(&c.threads)->default_value(c.threads), "input threads (0: the scheduler's choice)")(
      "autotune", po::value(&c.autotune)->default_value(c.autotune), "on or off: the scheduler moves input threads")(
      "accumulate", po::value(&c.accumulate)->default_value(c.accumulate), "batches per optimizer step")(
      "checkpoint", po::value(&c.checkpoint), "folder for epoch_N.safetensors and last.safetensors")(
      "resume", po::value(&c.resume), "a checkpoint to continue from (its epoch, step, LR and weights)")(
      "transform", po::value(&c.transforms)->composing(),
      "a training transform spec, repeatable, in order (default: random_resized_crop size=S scale=0.35:1,\n"
      "random_horizontal_flip, normalize; for the built-in dataset no crop); `stoke bench pipeline\n"
      "--list-transforms` lists them")(
      "seed", po::value(&c.seed)->default_value(c.seed), "shuffling, augmentation, initial weights")(
      "json", po::bool_switch(&c.json), "one JSON object per epoch and a final one on stdout");
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (c.epochs < 0 || c.batch < 1 || c.accumulate < 1) {
    return cli.usage_error("--epochs must be >= 0 (0: the default), --batch and --accumulate at least 1");
  }
  if (c.epochs == 0) c.epochs = c.data.empty() ? 6 : 10;
  if (c.precision != "fp32" && c.precision != "bf16" && c.precision != "fp16") {
    return cli.usage_error("--precision must be fp32, bf16 or fp16 (got '" + c.precision + "')");
  }
  if (c.autotune != "on" && c.autotune != "off") {
    return cli.usage_error("--autotune must be on or off (got '" + c.autotune + "')");
  }
  if (!c.transforms.empty() && c.transforms.back().rfind("normalize", 0) != 0) {
    return cli.usage_error("the last --transform must be normalize (the model takes normalized float images); got '" +
                           c.transforms.back() + "'");
  }
  nn::LrScheduleKind schedule_kind{};
  try {
    schedule_kind = nn::parse_lr_schedule(c.schedule);
  } catch (const std::invalid_argument& e) {
    return cli.usage_error(e.what());
  }

  // ---- data
  fs::path train_path = c.data;
  fs::path val_path = c.val;
  if (c.data.empty()) {
    const fs::path root = builtin_dataset(c.json);
    train_path = root / "train";
    if (val_path.empty()) val_path = root / "val";
  } else if (val_path.empty() && train_path.filename() == "train" && fs::is_directory(train_path.parent_path() / "val")) {
    val_path = train_path.parent_path() / "val";
  }
  const nodes::DatasetPtr train_set = open_dataset(train_path);
  const nodes::DatasetPtr val_set = val_path.empty() ? nullptr : open_dataset(val_path);
  if (train_set->size() < static_cast<std::size_t>(c.batch)) {
    throw std::runtime_error(train_path.string() + " has " + std::to_string(train_set->size()) +
                             " images, fewer than one batch of " + std::to_string(c.batch) + " (lower --batch)");
  }
  const int classes = static_cast<int>(train_set->classes().size());
  if (classes < 2) {
    throw std::runtime_error(train_path.string() + " has " + std::to_string(classes) +
                             " class; a classifier needs at least two (one subfolder per class)");
  }

  // ---- compute
  const gpu::Device device = gpu::select_device(c.device, c.json ? nullptr : &std::cerr);
  std::unique_ptr<gpu::Stream> stream;
  if (device.is_cuda()) stream = std::make_unique<gpu::Stream>(device);
  auto backend = nn::make_backend(device, stream ? stream->view() : gpu::StreamView::host());
  const gpu::DType compute = compute_dtype(c.precision);
  if (!backend->supports(compute, gpu::TensorLayout::nchw)) {
    return cli.usage_error("--precision " + c.precision + " needs a CUDA device; " + backend->describe() +
                           " computes in fp32 only");
  }
  auto model = nn::make_model(c.model, {.classes = classes, .seed = c.seed});
  model->to(device, backend->stream());

  const int size = c.size > 0 ? c.size : default_image_size(c.model);
  const auto batches_per_epoch = static_cast<std::int64_t>(train_set->size() / static_cast<std::size_t>(c.batch));
  const std::int64_t steps_per_epoch = std::max<std::int64_t>(1, batches_per_epoch / c.accumulate);
  const std::int64_t total_steps = steps_per_epoch * c.epochs;
  const auto warmup_steps = std::min<std::int64_t>(static_cast<std::int64_t>(c.warmup * static_cast<double>(steps_per_epoch)), total_steps - 1);
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
  if (!c.resume.empty()) {
    trainer.load(c.resume);
    if (!c.json) {
      std::fprintf(stderr, "stoke train: resumed from %s at epoch %lld, step %lld\n", c.resume.c_str(),
                   static_cast<long long>(trainer.epoch()), static_cast<long long>(trainer.step()));
    }
  }
  if (!c.checkpoint.empty()) fs::create_directories(c.checkpoint);
  if (!c.json) {
    std::fprintf(stderr, "stoke train: %s (%lld parameters, %d classes) on %s; %zu training images%s, %dx%d, batch %d\n",
                 c.model.c_str(), static_cast<long long>(nn::parameter_count(*model)), classes,
                 backend->describe().c_str(), train_set->size(),
                 val_set ? (", " + std::to_string(val_set->size()) + " validation").c_str() : "", size, size, c.batch);
  }

  const graph::SignalStop signals;  // Ctrl-C: the epoch's pipeline drains, a checkpoint is written
  InputConfig train_input;
  train_input.batch_size = static_cast<std::size_t>(c.batch);
  train_input.size = size;
  // The default augmentation: random crops for real photos; the shapes dataset's images are
  // already framed at their size, and a crop would cut the shape that is the label.
  if (!c.transforms.empty()) {
    train_input.transforms = c.transforms;
  } else if (c.data.empty()) {
    train_input.transforms = {"resize size=" + std::to_string(size), "center_crop size=" + std::to_string(size),
                              "random_horizontal_flip", "normalize"};
  } else {
    train_input.transforms = {"random_resized_crop size=" + std::to_string(size) + " scale=0.35:1",
                              "random_horizontal_flip", "normalize"};
  }
  train_input.threads = c.threads;
  train_input.autotune = c.autotune == "on";
  train_input.tuning.target = "train";
  train_input.drop_last = true;
  InputConfig val_input = train_input;
  val_input.transforms = {"resize size=" + std::to_string(size), "center_crop size=" + std::to_string(size),
                          "normalize"};
  val_input.tuning.target = "evaluate";
  // What `stoke classify` and `stoke evaluate` need to use a checkpoint on their own.
  trainer.set_metadata(to_metadata({.model = c.model,
                                    .image_size = size,
                                    .classes = train_set->classes(),
                                    .eval_transforms = val_input.transforms}));
  val_input.shuffle = false;
  val_input.drop_last = false;

  std::string last_checkpoint;
  bool interrupted = false;
  for (std::int64_t epoch = trainer.epoch(); epoch < c.epochs && !interrupted; ++epoch) {
    train_input.seed = c.seed * 1000003u + static_cast<std::uint64_t>(epoch);
    const auto progress = [&](const EpochTotals& t, const graph::Pipeline&) {
      if (c.json) return;
      std::fprintf(stderr, "\repoch %lld/%d  %6lld images  loss %.4f  acc %.3f  lr %.4f ",
                   static_cast<long long>(epoch + 1), c.epochs, static_cast<long long>(t.images),
                   t.images > 0 ? t.loss_sum / static_cast<double>(t.images) : 0.0,
                   t.images > 0 ? static_cast<double>(t.correct) / static_cast<double>(t.images) : 0.0,
                   static_cast<double>(trainer.lr()));
    };
    const EpochTotals train_totals = run_epoch(
        train_set, train_input, "train", *backend,
        [&](const BatchTensors& t) { return StepResult{trainer.train_batch(t.images, t.labels)}; }, progress);
    interrupted = train_totals.stopped;
    if (!c.json) std::fprintf(stderr, "\r%100s\r", "");

    EpochTotals val_totals;
    if (val_set && !interrupted) {
      val_totals = run_epoch(
          val_set, val_input, "evaluate", *backend,
          [&](const BatchTensors& t) {
            nn::Tensor logits;
            StepResult r{trainer.evaluate_batch(t.images, t.labels, &logits)};
            r.correct_top5 = top_k_correct(logits, t.labels, 5, *backend);
            return r;
          });
    }
    trainer.set_epoch(interrupted ? epoch : epoch + 1);
    if (!c.checkpoint.empty()) {
      // Both files are written atomically (Trainer::save: temporary file, flush, rename).
      const fs::path last = fs::path(c.checkpoint) / "last.safetensors";
      trainer.save(last);
      if (!interrupted) trainer.save(fs::path(c.checkpoint) / ("epoch_" + std::to_string(epoch + 1) + ".safetensors"));
      last_checkpoint = last.string();
    }

    const double train_loss = train_totals.images > 0 ? train_totals.loss_sum / static_cast<double>(train_totals.images) : 0;
    const double val_top1 = val_totals.images > 0 ? static_cast<double>(val_totals.correct) / static_cast<double>(val_totals.images) : 0;
    const double val_top5 = val_totals.images > 0 ? static_cast<double>(val_totals.correct_top5) / static_cast<double>(val_totals.images) : 0;
    const double images_per_sec = train_totals.seconds > 0 ? static_cast<double>(train_totals.images) / train_totals.seconds : 0;
    if (c.json) {
      Json j;
      j.field("epoch", static_cast<int>(epoch + 1));
      j.field("train_loss", train_loss);
      j.field("val_top1", val_top1);
      j.field("val_top5", val_top5);
      j.field("images_per_sec", images_per_sec);
      j.field("compute_busy", train_totals.compute_busy);
      j.field("bottleneck", train_totals.bottleneck);
      j.field("skipped", static_cast<std::uint64_t>(train_totals.skipped + val_totals.skipped));
      j.field("checkpoint", last_checkpoint);
      std::printf("%s\n", j.str().c_str());
    } else {
      char val_text[32] = "none";  // no validation split, or the epoch was interrupted before it
      if (val_totals.images > 0) std::snprintf(val_text, sizeof val_text, "%.3f", val_top1);
      std::printf("epoch %lld/%d: train loss %.4f, val top-1 %s, %.0f images/s, %s busy %.0f%% (limited by %s)%s\n",
                  static_cast<long long>(epoch + 1), c.epochs, train_loss, val_text, images_per_sec,
                  device.is_cpu() ? "CPU compute" : "GPU", 100 * train_totals.compute_busy,
                  train_totals.bottleneck.empty() ? "-" : train_totals.bottleneck.c_str(),
                  interrupted ? " (interrupted)" : "");
    }
    std::fflush(stdout);
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
