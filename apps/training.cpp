#include "training.hpp"

#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <stoke/gpu/event.hpp>
#include <stoke/gpu/pinned_allocator.hpp>
#include <stoke/gpu/to_device.hpp>
#include <stoke/graph/signal.hpp>
#include <stoke/nn/checkpoint.hpp>
#include <stoke/nn/models.hpp>
#include <stoke/nodes/shapes.hpp>

namespace stoke::app {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

fs::path cache_folder() {
  if (const char* dir = std::getenv("STOKE_CACHE"); dir != nullptr && *dir != '\0') return dir;
  if (const char* dir = std::getenv("XDG_CACHE_HOME"); dir != nullptr && *dir != '\0') return fs::path(dir) / "stoke";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') return fs::path(home) / ".cache/stoke";
  return ".stoke-cache";
}

// 5000 training images per class: with 2000 the small CNN memorised them and stopped at 0.897
// validation accuracy after 14 epochs; with 5000 it passes 0.92 in 5 (about 3 minutes on 2
// cores). Written once (about 3 s, 70 MB); a marker file says it is complete, so an interrupted
// generation is redone rather than trained on.
fs::path builtin_dataset(bool quiet) {
  const fs::path root = cache_folder() / "shapes-10x32-v2";
  const fs::path done = root / ".complete";
  if (fs::exists(done)) return root;
  const nodes::ShapesDatasetOptions options{.out = root,
                                            .classes = 10,
                                            .train_per_class = 5000,
                                            .val_per_class = 200,
                                            .size = 32,
                                            .seed = 1,
                                            .quality = 95,
                                            .force = true,
                                            .threads = 0};
  if (!quiet) std::fprintf(stderr, "stoke: writing the built-in shapes dataset to %s (once)\n", root.c_str());
  fs::create_directories(root);
  nodes::write_shapes_dataset(options, [&](std::size_t written, std::size_t total) {
    if (!quiet) std::fprintf(stderr, "\r  %zu / %zu images", written, total);
  });
  if (!quiet) std::fprintf(stderr, "\n");
  std::ofstream(done) << "complete\n";
  return root;
}

BatchTensors to_tensors(nodes::Batch& batch, nn::Backend& backend) {
  const auto n = static_cast<std::int64_t>(batch.size());
  const auto side = static_cast<std::int64_t>(batch.shape().height);
  nn::Tensor images = nn::Tensor::view_of(batch.f32().data(), {n, 3, side, side}, gpu::DType::f32);
  nn::Tensor labels = nn::Tensor::view_of(batch.labels().data(), {n}, gpu::DType::i32);
  if (backend.device().is_cpu()) return {images, labels, batch.indices()};
  BatchTensors out{images.to(backend.device(), backend.stream()), labels.to(backend.device(), backend.stream()),
                   batch.indices()};
  backend.stream().synchronize();
  return out;
}

BatchTensors to_tensors(const gpu::DeviceBatch& batch, nn::Backend& backend) {
  const gpu::TensorView pixels = batch.pixels();
  if (pixels.dtype != gpu::DType::f32 || pixels.layout != gpu::TensorLayout::nchw) {
    throw std::invalid_argument("the model takes normalized float images: end the transforms with normalize");
  }
  const auto n = static_cast<std::int64_t>(batch.size());
  nn::Tensor images =
      nn::Tensor::view_of(pixels.data, {n, pixels.c, pixels.h, pixels.w}, gpu::DType::f32, batch.device());
  // The labels are only read; the view's pointer is not const because a Tensor may be written.
  nn::Tensor labels =
      nn::Tensor::view_of(const_cast<std::int32_t*>(batch.device_labels()), {n}, gpu::DType::i32, batch.device());
  // The copy was enqueued on the to-device stage's stream: the compute stream waits for its event.
  if (const gpu::Event* ready = batch.ready()) backend.stream().wait(*ready);
  return {images, labels, batch.indices()};
}

namespace {

// A MeasureWindow's bookkeeping in run_epoch's sink (serial: one call at a time).
struct WindowState {
  MeasureWindow window;
  bool active = window.warmup_batches > 0 || window.seconds > 0;
  std::int64_t warmup_seen = 0;
  bool open = false;
  bool done = false;  // the time is up: the pipeline is cancelled
  Clock::time_point start{}, end{};
  std::chrono::nanoseconds step_busy{0};  // the sink's own time in the window's batches
  std::vector<graph::StageStats> at_start{}, at_end{};

  double seconds() const { return open ? std::chrono::duration<double>(end - start).count() : 0; }
  void begin(const graph::Pipeline& pipe, Clock::time_point now) {
    open = true;
    start = end = now;
    at_start = pipe.stats();
  }
  void after_batch(graph::Pipeline& pipe, Clock::time_point call_start) {
    end = Clock::now();
    step_busy += end - call_start;
    if (window.seconds > 0 && seconds() >= window.seconds) {
      at_end = pipe.stats();
      done = true;
      pipe.cancel();  // what is still queued would not be counted: drop it rather than drain it
    }
  }
  // Each stage's busy time within the window; the sink's is its own measure, since a snapshot
  // taken inside a call does not yet hold that call's time.
  std::vector<graph::StageStats> stages(const graph::RunReport& report, const std::string& sink) const {
    std::vector<graph::StageStats> out = done ? at_end : report.stages;
    for (graph::StageStats& s : out) {
      for (const graph::StageStats& b : at_start) {
        if (b.name == s.name) s.busy -= b.busy;
      }
      if (s.name == sink) s.busy = step_busy;
    }
    return out;
  }
};

}  // namespace

EpochTotals run_epoch(const nodes::DatasetPtr& dataset, const InputConfig& config, const std::string& stage,
                      nn::Backend& backend, const BatchStep& step, const EpochProgress& progress,
                      const MeasureWindow& window) {
  WindowState w{.window = window};
  InputConfig pinned = config;
  if (!backend.device().is_cpu()) pinned.allocator = gpu::batch_allocator(backend.device());
  // The to-device stage holds up to two host batches: one queued in front of it, one crossing.
  // Without those two slots the batch stage could wait for a slot inside a oneTBB task that the
  // train step's own parallel loops stole -- on the thread whose step would free the slot.
  constexpr std::size_t to_device_queue = 1;
  pinned.extra_slots += to_device_queue + 1;
  Input input = make_input(dataset, pinned);
  input.pipeline_options.stop_on_signal = true;  // Ctrl-C drains the epoch (under a SignalStop)
  graph::Pipeline pipe(input.pipeline_options);
  // The device slots: as many as the host pool has, so that to-device never holds a batch back
  // that the pool could give. On the CPU device the stage passes host batches through.
  const gpu::ToDevice to_device(backend.device(), input.pool.shape(), {.slots = input.pool.slots(), .timeline = {}});
  graph::StageOptions to_device_options = gpu::ToDevice::stage_options();
  to_device_options.capacity = to_device_queue;
  EpochTotals totals;
  auto start = Clock::now();
  auto last_progress = start;
  add_input(pipe, input, pinned)
      .async<gpu::DeviceBatch>("to-device", to_device, to_device_options)
      .sink(stage,
            [&](gpu::DeviceBatch batch) {
              // After Ctrl-C the pipeline drains what is in flight; those batches are not
              // trained on, so that the checkpoint is written right after the current step.
              if (graph::SignalStop::received() > 0 || w.done) return;
              const auto call_start = Clock::now();
              if (w.active && !w.open && w.warmup_seen == w.window.warmup_batches) w.begin(pipe, call_start);
              const BatchTensors t = to_tensors(batch, backend);
              // Isolated: while the CPU backend's parallel loops wait for each other, their thread
              // must not pick up the pipeline's read/decode/batch tasks, which would run inside
              // the step's time (and a batch task may wait there for a slot this step holds).
              StepResult r;
              nn::LossStats s;
              tbb::this_task_arena::isolate([&] {
                r = step(t);
                // Reading the stats waits for the step's work on the stream: the batch's device
                // slot is free to go back when this call returns.
                s = r.loss.read(backend.stream());
              });
              if (w.active && !w.open) {  // a warmup batch: stepped, not counted
                ++w.warmup_seen;
                return;
              }
              const std::int64_t n = t.labels.numel();
              totals.loss_sum += s.loss * static_cast<double>(n);
              totals.correct += s.correct;
              if (r.correct_top5 >= 0) totals.correct_top5 += r.correct_top5;
              totals.images += n;
              ++totals.batches;
              if (w.open) w.after_batch(pipe, call_start);
              if (progress && Clock::now() - last_progress > std::chrono::milliseconds(250)) {
                last_progress = Clock::now();
                totals.seconds = w.open ? w.seconds() : std::chrono::duration<double>(last_progress - start).count();
                progress(totals, pipe);
              }
            },
            {.capacity = config.prefetch});
  start = Clock::now();
  totals.report = pipe.run();
  const graph::RunReport& report = totals.report;
  totals.seconds = std::chrono::duration<double>(report.elapsed).count();
  totals.skipped = report.skipped;
  totals.skipped_files = name_skips(report, input, pinned);
  if (!config.trace_file.empty()) pipe.write_trace(config.trace_file);
  totals.stopped = (report.stopped || report.cancelled) && !w.done;
  if (w.active) totals.seconds = w.seconds();
  const Limit limit = find_limit(w.active ? w.stages(report, stage) : report.stages, stage, totals.seconds);
  totals.compute_busy = limit.compute_busy;
  totals.bottleneck = limit.stage;
  return totals;
}

Limit find_limit(const std::vector<graph::StageStats>& stages, const std::string& compute_stage, double seconds) {
  Limit limit;
  std::chrono::nanoseconds busiest{0};
  for (const graph::StageStats& s : stages) {
    if (s.name == compute_stage) {
      limit.compute_busy = seconds > 0 ? std::chrono::duration<double>(s.busy).count() / seconds : 0;
    } else if (s.busy > busiest) {
      busiest = s.busy;
      limit.stage = s.name;
    }
  }
  if (limit.compute_busy >= 0.9) limit.stage = compute_stage;
  return limit;
}

int default_image_size(const std::string& model) { return model == "small_cnn" || model == "mobilenet" ? 32 : 224; }

std::vector<std::string> default_train_transforms(int size, bool builtin) {
  const std::string side = std::to_string(size);
  if (builtin) return {"resize size=" + side, "center_crop size=" + side, "random_horizontal_flip", "normalize"};
  return {"random_resized_crop size=" + side + " scale=0.35:1", "random_horizontal_flip", "normalize"};
}

gpu::DType compute_dtype(const std::string& precision) {
  if (precision == "fp32") return gpu::DType::f32;
  if (precision == "bf16") return gpu::DType::bf16;
  if (precision == "fp16") return gpu::DType::f16;
  throw std::invalid_argument("--precision must be fp32, bf16 or fp16 (got '" + precision + "')");
}

HostScores to_host(const nn::Tensor& logits, const nn::Tensor& labels, nn::Backend& backend) {
  if (logits.rank() != 2 || labels.numel() != logits.dim(0)) {
    throw std::invalid_argument("logits " + logits.describe() + " do not match labels " + labels.describe());
  }
  HostScores out{.scores = logits.to_vector(backend.stream()),
                 .labels = std::vector<std::int32_t>(static_cast<std::size_t>(labels.numel())),
                 .classes = static_cast<std::size_t>(logits.dim(1))};
  const nn::Tensor host = nn::Tensor::view_of(out.labels.data(), labels.shape(), gpu::DType::i32);
  host.copy_from(labels, backend.stream());
  backend.stream().synchronize();
  return out;
}

bool in_top_k(std::span<const float> row, std::int32_t label, int k) {
  const float mine = row[static_cast<std::size_t>(label)];
  return std::count_if(row.begin(), row.end(), [&](float v) { return v > mine; }) < k;
}

std::int64_t top_k_correct(const nn::Tensor& logits, const nn::Tensor& labels, int k, nn::Backend& backend) {
  const HostScores host = to_host(logits, labels, backend);
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < host.labels.size(); ++i) correct += in_top_k(host.row(i), host.labels[i], k) ? 1 : 0;
  return correct;
}

namespace {

// Lists are stored one entry per line: class names are folder names, which have no newline.
std::string join_lines(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : "\n") + item;
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

std::map<std::string, std::string> to_metadata(const ModelCard& card) {
  return {{"model", card.model},
          {"image_size", std::to_string(card.image_size)},
          {"classes", join_lines(card.classes)},
          {"eval_transforms", join_lines(card.eval_transforms)}};
}

ModelCard model_card_from(const std::map<std::string, std::string>& metadata, const std::string& source) {
  const auto get = [&](const char* key) -> const std::string& {
    const auto it = metadata.find(key);
    if (it == metadata.end()) {
      throw std::runtime_error(source + ": no '" + key +
                               "' in the checkpoint's metadata; only checkpoints written by `stoke train` carry the "
                               "model, its class names and its image size");
    }
    return it->second;
  };
  ModelCard card;
  card.model = get("model");
  card.image_size = std::atoi(get("image_size").c_str());
  card.classes = split_lines(get("classes"));
  card.eval_transforms = split_lines(get("eval_transforms"));
  if (card.image_size < 1 || card.classes.size() < 2) {
    throw std::runtime_error(source + ": the checkpoint's metadata is damaged (image_size '" + get("image_size") +
                             "', " + std::to_string(card.classes.size()) + " class names)");
  }
  return card;
}

Compute make_compute(const std::string& spec, std::ostream* log) {
  Compute c;
  c.device = gpu::select_device(spec, log);
  if (c.device.is_cuda()) c.stream = std::make_unique<gpu::Stream>(c.device);
  c.backend = nn::make_backend(c.device, c.stream ? c.stream->view() : gpu::StreamView::host());
  return c;
}

InferenceModel load_for_inference(const fs::path& checkpoint, nn::Backend& backend) {
  // The header first: the card says which model to build, and a file that is not a checkpoint
  // fails here without its tensors being read.
  const std::string source = checkpoint.string();
  InferenceModel loaded{model_card_from(nn::read_checkpoint_metadata(checkpoint).extra, source), nullptr};
  try {
    loaded.model = nn::make_model(loaded.card.model, {.classes = static_cast<int>(loaded.card.classes.size())});
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(source + ": the checkpoint's model cannot be built: " + e.what());
  }
  loaded.model->to(backend.device(), backend.stream());
  nn::load_weights(checkpoint, *loaded.model, backend.stream());
  return loaded;
}

}  // namespace stoke::app
