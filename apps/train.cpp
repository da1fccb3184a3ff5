// `stoke train`: trains a built-in model on an image dataset through the whole graph with
// train::fit -- source -> read -> decode + augment -> batch -> train step, the scheduler keeping
// the train step fed, a validation pass and a checkpoint after every epoch. With no --data it
// trains the small CNN on the built-in shapes dataset, written once into a cache folder: the
// quickstart's main job. This file parses the options and prints; the loop is the library's.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <stoke/gpu/nvml_monitor.hpp>
#include <stoke/graph/signal.hpp>
#include <stoke/nn/models.hpp>
#include <stoke/train/builtin.hpp>
#include <stoke/train/compute.hpp>
#include <stoke/train/fit.hpp>
#include <stoke/train/json.hpp>
#include <stoke/train/ranks.hpp>
#include <stoke/train/recipe.hpp>
#include <stoke/train/report.hpp>
#include <stoke/train/run.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "progress.hpp"

namespace stoke::app {

using namespace stoke::train;  // NOLINT(google-build-using-namespace): the commands are glue over it
namespace {

namespace fs = std::filesystem;
namespace po = boost::program_options;

struct TrainConfig {
  Recipe recipe{.epochs = 0};  // --epochs 0: 6 for the built-in dataset, else 10
  std::string data;            // empty: the built-in shapes dataset
  std::string val;             // empty: DATA/../val when DATA ends in "train", else none
  std::string format = "auto";
  std::string color = "rgb";
  std::string on_error = "skip";
  double stall_limit = 300;  // seconds; 0: not watched
  std::string on_stall = "warn";
  std::string schedule = "cosine";
  std::string precision = "fp32";
  std::string channels_last = "auto";
  std::string autotune = "on";
  std::string device = "auto";
  std::string checkpoint;  // a folder; empty: none
  std::string resume;      // a checkpoint file
  std::vector<std::string> plugins;
  bool deterministic = false;
  std::string trace;   // a Chrome trace of the training pipeline
  std::string report;  // an HTML page of the run
  std::string config;  // a file of these options
  bool json = false;
  // data-parallel (under mpirun or srun)
  bool sync_bn = false;
  std::string shard_remainder = "drop";
  double dist_timeout = 300;
  double bucket_mb = 25;
};

constexpr const char* summary =
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
    "  stoke train --config runs/r50.conf             # the same, options in a file\n\n"
    "Data-parallel: under a launcher every process is a rank of one run -- each trains on its\n"
    "share of every epoch (the same number of steps each), the gradients are averaged over the\n"
    "ranks while backward runs (MPI on CPU ranks, NCCL on GPUs, one GPU per local rank), rank 0\n"
    "prints and writes the checkpoints, and a rank that fails or stops answering ends the job.\n"
    "--batch is per rank: 2 ranks x --batch 32 step like 1 process with --batch 64.\n\n"
    "  mpirun -np 2 stoke train --device cpu          # 2 CPU ranks on this machine\n"
    "  mpirun -np 8 --hostfile hosts stoke train --data imagenet/train --batch 128 --sync-bn";

void add_options(CommandOptions& cli, TrainConfig& c) {
  const std::string models = "the model: " + nn::model_names();
  const auto value = [](auto* target) { return po::value(target)->default_value(*target); };
  Recipe& r = c.recipe;
  cli.add()("data", po::value(&c.data),
            "training images: an ImageFolder, a file list, CIFAR batches, a .stoke shard or WebDataset tar shards")(
      "val", po::value(&c.val), "validation images (default: DATA's sibling 'val' when DATA is a 'train' folder)")(
      "format", value(&c.format), format_help().c_str())(
      "color", value(&c.color),
      "rgb: decode to 8-bit RGB; keep: what the files hold (grayscale scans as 1 channel, 16-bit PNG and DICOM "
      "values as they are); the model's input channels follow the data")(
      "on-error", value(&c.on_error),
      "an unreadable or corrupt image: skip (count it, list it at the end) or fail (stop the run)")(
      "stall-limit", value(&c.stall_limit),
      "seconds one pipeline call (reading or decoding one file, a plugin's transform, a train step) may run "
      "before it is reported with its stage and file (0: not watched)")(
      "on-stall", value(&c.on_stall),
      "a call past --stall-limit: warn (report it, go on) or fail (end the run with exit status 1 once the "
      "call returns; one that never returns ends the process with status 70 after another --stall-limit)")(
      "model", value(&r.model), models.c_str())(
      "epochs", value(&r.epochs), "passes over the training data (0: 6 for the built-in dataset, else 10)")(
      "batch", value(&r.batch), "images per batch")("size", value(&r.size),
                                                    "image side in pixels (0: 32 for small_cnn/mobilenet, else 224)")(
      "lr", value(&r.lr), "learning rate after the warmup")("schedule", value(&c.schedule),
                                                            "cosine, step (x0.1 every 30% of the run) or constant")(
      "warmup", value(&r.warmup), "epochs of linear warmup")("momentum", value(&r.momentum), "SGD momentum (Nesterov)")(
      "weight-decay", value(&r.weight_decay), "on weights, not biases or BN")(
      "label-smoothing", value(&r.label_smoothing), "in [0, 1)")("precision", value(&c.precision),
                                                                 "fp32, or bf16 / fp16 mixed precision (CUDA)")(
      "channels-last", value(&c.channels_last), channels_last_help)(
      "device", value(&c.device), "auto, cpu, cuda or cuda:N")("threads", value(&r.threads),
                                                               "input threads (0: the scheduler's choice)")(
      "autotune", value(&c.autotune), "on or off: the scheduler moves input threads")(
      "accumulate", value(&r.accumulate), "batches per optimizer step")(
      "checkpoint", po::value(&c.checkpoint), "folder for epoch_N.safetensors and last.safetensors")(
      "resume", po::value(&c.resume), "a checkpoint to continue from (its epoch, position, LR and weights)")(
      "transform", po::value(&r.transforms)->composing(),
      "a training transform spec, repeatable, in order (default: random_resized_crop size=S scale=0.35:1,\n"
      "random_horizontal_flip, normalize; for the built-in dataset no crop); `stoke bench pipeline\n"
      "--list-transforms` lists them. The batches cross to the device as uint8: a last normalize runs\n"
      "there; without one the pixels are scaled to 0..1")(
      "plugin", po::value(&c.plugins)->composing(),
      "a shared library of extra transforms or data formats (see examples/plugin), repeatable")(
      "seed", value(&r.seed), "shuffling, augmentation, initial weights")(
      "deterministic", po::bool_switch(&c.deterministic),
      "bit-identical weights for a seed whatever --threads (the CPU device always is; CUDA is refused)")(
      "trace", po::value(&c.trace),
      "write a Chrome trace (Perfetto, chrome://tracing) of the training pipeline (all epochs, its first 1M spans)")(
      "report", po::value(&c.report),
      "write an HTML page of the run (self-contained): throughput and busy % over time, per-stage\n"
      "busy/starved/blocked, the scheduler's moves, loss and accuracy per epoch, skipped files;\n"
      "rewritten after every epoch")("config", po::value(&c.config),
                                     "read options from this file too: 'key = value' lines (the command line wins)")(
      "json", po::bool_switch(&c.json), "one JSON object per epoch and a final one on stdout")(
      "sync-bn", po::bool_switch(&c.sync_bn),
      "data-parallel: batch norm statistics over every rank's batch (default: each rank's own)")(
      "shard-remainder", value(&c.shard_remainder),
      "data-parallel: items left over when the ranks do not divide the training set: drop (for the epoch) or "
      "pad (repeat the first ones)")(
      "dist-timeout", value(&c.dist_timeout),
      "data-parallel: seconds a rank waits for the others at a collective before the job fails, naming the "
      "ranks that did not come")("bucket-mb", value(&c.bucket_mb),
                                 "data-parallel: MiB of gradients per all-reduce bucket");
  cli.config_file_option("config");
}

// A usage mistake the parser cannot see, or "" when there is none; completes the recipe from
// the options given as words.
std::string check(TrainConfig& c) {
  Recipe& r = c.recipe;
  if (r.epochs < 0 || r.batch < 1 || r.accumulate < 1) {
    return "--epochs must be >= 0 (0: the default), --batch and --accumulate at least 1";
  }
  try {
    r.precision = compute_dtype(c.precision);
    r.channels_last = parse_channels_last(c.channels_last);
    r.schedule = nn::parse_lr_schedule(c.schedule);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  for (std::string mistake :
       {format_error(c.format), choice_error("on-error", c.on_error, {"skip", "fail"}),
        choice_error("on-stall", c.on_stall, {"warn", "fail"}), choice_error("autotune", c.autotune, {"on", "off"}),
        choice_error("color", c.color, {"rgb", "keep"}),
        choice_error("shard-remainder", c.shard_remainder, {"drop", "pad"})}) {
    if (!mistake.empty()) return mistake;
  }
  if (c.data.empty() && c.format != "auto") return "--format needs --data";
  if (!(c.dist_timeout > 0) || !(c.bucket_mb > 0)) return "--dist-timeout and --bucket-mb must be positive";
  if (!(c.stall_limit >= 0)) return "--stall-limit must be >= 0 seconds (0: not watched)";
  for (std::size_t i = 0; i + 1 < r.transforms.size(); ++i) {
    if (r.transforms[i].rfind("normalize", 0) == 0) {
      return "normalize must be the last --transform (the compute stage runs it on the device, after the "
             "others); got '" +
             r.transforms[i + 1] + "' after it";
    }
  }
  r.on_error = c.on_error == "fail" ? graph::OnError::fail : graph::OnError::skip;
  r.stall_limit = std::chrono::milliseconds(static_cast<std::int64_t>(c.stall_limit * 1000));
  r.on_stall = c.on_stall == "fail" ? graph::OnStall::fail : graph::OnStall::warn;
  r.color = c.color == "keep" ? nodes::DecodeColor::keep : nodes::DecodeColor::rgb;
  r.autotune = c.autotune == "on";
  r.builtin_data = c.data.empty();
  if (r.epochs == 0) r.epochs = r.builtin_data ? 6 : 10;
  return "";
}

void print_epoch(const EpochSummary& s) {
  char val_text[48] = "none";  // no validation split, or the epoch was interrupted before it
  if (s.val_top1) std::snprintf(val_text, sizeof val_text, "%.3f (top-5 %.3f)", *s.val_top1, *s.val_top5);
  std::printf("epoch %lld/%d: train loss %.4f, val top-1 %s, %.0f images/s, compute busy %.0f%% (limited by %s)%s\n",
              static_cast<long long>(s.epoch), s.epochs, s.train_loss, val_text, s.images_per_sec,
              100 * s.train.compute_busy, s.train.bottleneck.empty() ? "-" : s.train.bottleneck.c_str(),
              s.interrupted ? " (interrupted)" : "");
  std::fflush(stdout);
}

// Data-parallel: each rank's throughput and the all-reduce this rank (0) measured.
void print_ranks(const EpochSummary& s) {
  std::string rates;
  for (std::size_t r = 0; r < s.rank_images_per_sec.size(); ++r) {
    rates += (r == 0 ? "" : ", ") + std::to_string(static_cast<long long>(s.rank_images_per_sec[r]));
  }
  const double hidden = allreduce_hidden(s);
  std::printf("  ranks: %s images/s; all-reduce %.2f s, %.0f%% hidden under backward (%.2f s waited)\n", rates.c_str(),
              s.allreduce_seconds, 100 * hidden, s.allreduce_exposed_seconds);
  std::fflush(stdout);
}

void print_skips(const FitResult& r) {
  if (r.skipped == 0) return;
  std::uint64_t listed = 0;  // skips of the listed files: one per file and epoch
  for (const SkippedFile& f : r.skipped_files) listed += std::max<std::size_t>(1, f.epochs.size());
  const std::size_t files = r.skipped_files.size();
  std::fprintf(stderr, "stoke train: %s%zu file%s skipped (unreadable or corrupt):\n",
               r.skipped > listed ? "over " : "", files, files == 1 ? "" : "s");
  for (const SkippedFile& f : r.skipped_files)
    std::fprintf(stderr, "  %s (%s): %s\n", f.file.c_str(), epochs_text(f.epochs).c_str(), f.reason.c_str());
  if (r.skipped > listed)
    std::fprintf(stderr, "  and %llu more skips, of files not listed\n",
                 static_cast<unsigned long long>(r.skipped - listed));
}

// The calls past --stall-limit, again at the end (each was also reported when found).
void print_stalls(const FitResult& r) {
  if (r.stalls.empty()) return;
  std::fprintf(stderr, "stoke train: %zu pipeline call%s ran past --stall-limit:\n", r.stalls.size(),
               r.stalls.size() == 1 ? "" : "s");
  for (const graph::Stall& s : r.stalls) std::fprintf(stderr, "  %s\n", graph::describe(s).c_str());
}

// --data and --val, or the built-in dataset: written once (and cached), by rank 0 before the
// others open it.
TrainingData open_data(const TrainConfig& c, Ranks& ranks) {
  fs::path builtin;
  if (c.data.empty() && ranks.leader()) builtin = builtin_dataset_with_progress(c.json);
  ranks.barrier();
  if (c.data.empty() && !ranks.leader()) builtin = builtin_dataset_with_progress(true);
  const fs::path train_path = c.data.empty() ? builtin / "train" : fs::path(c.data);
  const fs::path val_path = c.data.empty() && c.val.empty() ? builtin / "val" : fs::path(c.val);
  return open_training_data(train_path, val_path, c.format, static_cast<std::size_t>(c.recipe.batch));
}

// What the run is, on stderr before it trains: the model, device and data, the ranks, where a
// resumed run starts, and what the datasets left out when they opened (never read, so neither
// trained on nor skipped).
void print_start(const Run& run, const std::string& resume) {
  const Recipe& recipe = run.recipe();
  const TrainingData& data = run.data();
  const nn::Trainer& trainer = run.trainer();
  if (!resume.empty()) {
    const std::size_t position = run.resume_position();
    std::fprintf(stderr, "stoke train: resumed from %s at epoch %lld, step %lld%s\n", resume.c_str(),
                 static_cast<long long>(trainer.epoch() + 1), static_cast<long long>(trainer.step()),
                 position > 0 ? (", image " + std::to_string(position) + " of the epoch").c_str() : "");
  }
  const std::string parameters = std::to_string(nn::parameter_count(run.model()));
  const int size = recipe.image_size();
  std::fprintf(
      stderr, "stoke train: %s (%s parameters, %d classes) on %s in %s %s; %zu training images%s, %dx%d, batch %d\n",
      recipe.model.c_str(), parameters.c_str(), run.classes(), run.backend().describe().c_str(),
      precision_name(recipe.precision).c_str(), layout_name(run.model().layout()).c_str(), data.train->size(),
      data.val ? (", " + std::to_string(data.val->size()) + " validation").c_str() : "", size, size, recipe.batch);
  if (run.world() > 1) {
    std::fprintf(stderr, "stoke train: %s; %d images per step\n", run.describe_ranks().c_str(),
                 recipe.batch * run.world());
  }
  print_left_out("stoke train", data.train_path.string(), left_out_of(*data.train));
  if (data.val) print_left_out("stoke train", data.val_path.string(), left_out_of(*data.val));
}

using GpuBusy = std::function<std::optional<double>()>;

// The progress line of the training pass (the compute step's busy share, NVML's utilization
// beside it on a GPU, under its own name) and rank 0's line per epoch, text or JSON.
FitCallbacks show_progress(const TrainConfig& c, const Ranks& ranks, ProgressLine& line, const GpuBusy& gpu_busy) {
  FitCallbacks callbacks;
  callbacks.on_progress = [&line, gpu_busy, epochs = c.recipe.epochs](const FitProgress& p) {
    if (p.phase != Phase::train) return;
    const Limit limit = find_limit(p.totals.report.stages, "train", p.totals.seconds);  // this epoch's
    char gpu_text[48] = "";
    if (const auto gpu = gpu_busy()) std::snprintf(gpu_text, sizeof gpu_text, ", GPU %.0f%% (NVML)", 100 * *gpu);
    char suffix[160];
    std::snprintf(suffix, sizeof suffix, "compute busy %.0f%%%s (limit: %s)", 100 * limit.compute_busy, gpu_text,
                  limit.stage.empty() ? "-" : limit.stage.c_str());
    const double loss = p.totals.images > 0 ? p.totals.loss_sum / static_cast<double>(p.totals.images) : 0.0;
    line.show("epoch " + std::to_string(p.epoch) + "/" + std::to_string(epochs), p.totals.images, p.pass_images,
              p.totals.seconds, loss, static_cast<double>(p.lr), suffix);
  };
  callbacks.on_pass_end = [&line](std::int64_t, Phase phase, const EpochTotals&) {
    if (phase == Phase::train) line.clear();
  };
  callbacks.on_epoch = [json = c.json, leader = ranks.leader(), alone = ranks.world() == 1](const EpochSummary& s) {
    if (!leader) return true;
    if (json) {
      print_json(to_json(s));
    } else {
      print_epoch(s);
      if (!alone) print_ranks(s);
    }
    return true;
  };
  if (!c.checkpoint.empty()) callbacks.checkpoint = checkpoint_every_epoch(c.checkpoint);
  return callbacks;
}

// `callbacks`, recording the run into `recorder` for the HTML page at `html`: the settings, what
// the datasets left out, and every epoch.
FitCallbacks with_report(RunRecorder& recorder, const Run& run, const std::string& html, FitCallbacks callbacks,
                         const GpuBusy& gpu_busy) {
  const Recipe& recipe = run.recipe();
  const TrainingData& data = run.data();
  std::vector<std::pair<std::string, std::string>> settings = {
      {"data", data.train_path.string()},
      {"validation", data.val ? data.val_path.string() : "none"},
      {"model", recipe.model + " (" + std::to_string(nn::parameter_count(run.model())) + " parameters)"},
      {"device", run.backend().describe()}};
  for (auto& row : settings_of(recipe)) settings.push_back(std::move(row));
  recorder.left_out(data.train_path.string(), left_out_of(*data.train));
  if (data.val) recorder.left_out(data.val_path.string(), left_out_of(*data.val));
  return record_fit(recorder, std::move(callbacks),
                    {.html = html,
                     .title = "stoke train: " + recipe.model,
                     .settings = settings,
                     .gpu_busy = gpu_busy,
                     .network = [train = data.train] { return train->network(); }});
}

}  // namespace

// The run, once the options are parsed, as one of `ranks` (alone: one).
int run_training(TrainConfig& c, CommandOptions& cli, Ranks& ranks) {
  const Recipe& recipe = c.recipe;
  // Rank 0 speaks for the run; the others print only what goes wrong.
  if (!ranks.leader()) c.json = false;
  const bool quiet = c.json || !ranks.leader();
  TrainingData data = open_data(c, ranks);

  // One GPU per local rank: "cuda" (or "auto" on a machine with GPUs) becomes cuda:<local rank>.
  ComputeContext machine = make_compute(rank_device(c.device, ranks), quiet ? nullptr : &std::cerr);
  if (c.deterministic && !machine.device.is_cpu()) {
    return cli.usage_error(
        "--deterministic needs the CPU device (cuDNN's searched algorithms are not bit-reproducible); "
        "add --device cpu");
  }
  if (!machine.backend->supports(recipe.precision, gpu::TensorLayout::nchw)) {
    return cli.usage_error("--precision " + c.precision + " needs a CUDA device; " + machine.backend->describe() +
                           " computes in fp32 only");
  }
  const gpu::NvmlMonitor gpu_monitor(machine.device, std::chrono::milliseconds(500));
  // The datasets, the model, the gradient sync over the ranks (NCCL on GPUs, MPI on CPU ranks;
  // batch norm over every rank's batch with --sync-bn) and the trainer, resumed when asked.
  Run run(recipe, std::move(data), std::move(machine),
          {.communicator = &ranks.communicator(),
           .data_parallel = {.bucket_bytes = static_cast<std::size_t>(c.bucket_mb * 1024 * 1024), .sync_bn = c.sync_bn},
           .resume = c.resume});
  if (!c.checkpoint.empty() && ranks.leader()) fs::create_directories(c.checkpoint);
  if (const fs::path folder = fs::path(c.report).parent_path(); !folder.empty()) fs::create_directories(folder);
  if (!quiet) print_start(run, c.resume);
  FitOptions options = run.fit_options();
  options.trace_file = c.trace;
  options.shard_remainder = c.shard_remainder == "pad" ? nodes::ShardRemainder::pad : nodes::ShardRemainder::drop;

  // ---- what the run shows: a progress line, a JSON or text line per epoch, the HTML report
  const GpuBusy gpu_busy = [&]() -> std::optional<double> {  // NVML's utilization (nothing on the CPU device)
    if (const auto stats = gpu_monitor.stats(); stats.last) return stats.last->utilization_pct / 100.0;
    return std::nullopt;
  };
  ProgressLine progress_line(!quiet);
  FitCallbacks callbacks = show_progress(c, ranks, progress_line, gpu_busy);
  RunRecorder recorder;
  if (!c.report.empty() && ranks.leader())
    callbacks = with_report(recorder, run, c.report, std::move(callbacks), gpu_busy);

  const graph::SignalStop signals(2);  // Ctrl-C: the step finishes, a checkpoint is written; again: exit now
  const FitResult result = run.fit(callbacks, options);
  if (!ranks.leader()) return result.interrupted ? 130 : 0;
  if (c.json) print_json(to_json(result));
  if (result.network && !c.json) std::fprintf(stderr, "stoke train: %s\n", network_text(*result.network).c_str());
  print_skips(result);
  print_stalls(result);
  if (result.interrupted) {
    std::fprintf(stderr, "stoke train: interrupted; %s\n",
                 result.checkpoint.empty() ? "no --checkpoint folder, nothing saved"
                                           : ("resume with --resume " + result.checkpoint.string()).c_str());
    return 130;
  }
  return 0;
}

int train(int argc, char** argv) {
  TrainConfig c;
  CommandOptions cli("train", summary);
  add_options(cli, c);
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  // Plugins first: they add transforms and data formats that --transform and --format may name.
  for (const std::string& plugin : c.plugins) load_plugin(plugin);
  if (const std::string mistake = check(c); !mistake.empty()) return cli.usage_error(mistake);
  // A rank that fails ends the whole job, naming itself: the others would otherwise wait at their
  // next collective until --dist-timeout.
  Ranks ranks(std::chrono::milliseconds(static_cast<std::int64_t>(c.dist_timeout * 1000)));
  return ranks.guard("stoke train", [&] { return run_training(c, cli, ranks); });
}

}  // namespace stoke::app
