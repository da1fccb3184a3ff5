#include "stoke/bench/input_pipeline.hpp"

#include <algorithm>
#include <atomic>
#include <nlohmann/json.hpp>
#include <opencv2/core/utility.hpp>
#include <optional>
#include <stoke/nodes/collate.hpp>
#include <stoke/nodes/decode_augment.hpp>
#include <stoke/nodes/normalize.hpp>
#include <stoke/train/json.hpp>
#include <thread>

#include "opencv_threads.hpp"
#include "stoke/bench/timing.hpp"

namespace stoke::bench {

double InputPipelineResult::images_per_sec() const noexcept {
  return seconds > 0 ? static_cast<double>(images) / seconds : 0.0;
}

double InputPipelineResult::efficiency() const noexcept {
  return baseline_images_per_sec > 0 ? images_per_sec() / (threads * baseline_images_per_sec) : 0.0;
}

double InputPipelineResult::busy_pct(const graph::StageStats& stage) const noexcept {
  const double busy = std::chrono::duration<double>(stage.busy).count();
  return seconds > 0 ? 100.0 * busy / (seconds * std::max(1, stage.concurrency)) : 0.0;
}

std::string InputPipelineResult::busiest_stage() const {
  std::string busiest;
  double most = -1;
  for (const graph::StageStats& stage : report.stages) {
    if (busy_pct(stage) > most) {
      most = busy_pct(stage);
      busiest = stage.name;
    }
  }
  return busiest;
}

double plain_loop_images_per_sec(const nodes::DatasetPtr& dataset, const train::InputConfig& config,
                                 std::size_t images) {
  train::Input input = train::make_input(dataset, config);
  nodes::ReadSample read(input.dataset);
  nodes::DecodeAugment decode(nodes::Decoder(config.decode), nodes::Augment(input.transforms, config.seed),
                              config.fuse);
  std::optional<nodes::Normalize> normalize;  // the batch stage's, when it normalizes (Input::normalize_in_batch)
  if (const auto& n = input.normalize_in_batch) normalize.emplace(n->mean, n->stddev, n->range);
  auto batch = input.pool.acquire();
  batch.set_size(batch.capacity());
  const auto order = input.order.indices(0);
  const std::size_t count = std::min(images, order.size());
  const std::size_t warmup = std::min<std::size_t>(8, count / 4);
  std::size_t done = 0;
  Clock::time_point start;
  for (std::size_t i = 0; i < count; ++i) {
    if (i == warmup) start = Clock::now();
    try {
      nodes::Image image = decode(read(nodes::ItemRef{order[i], 0}));
      nodes::copy_into(batch, i % config.batch_size, image, false, normalize ? &*normalize : nullptr);
      if (i >= warmup) ++done;
    } catch (const std::exception&) {
      // bad files cost what they cost in the pipeline too; they are not counted as images
    }
  }
  const double t = seconds_between(start, Clock::now());
  return t > 0 ? static_cast<double>(done) / t : 0.0;
}

InputPipelineResult measure_input_pipeline(const nodes::DatasetPtr& dataset, train::InputConfig config,
                                           const InputPipelineOptions& options) {
  const OpenCvThreads one_per_call(1);
  InputPipelineResult result{
      .batch_size = config.batch_size, .size = config.size, .fuse = config.fuse, .autotune = config.autotune};
  result.threads =
      config.threads > 0 ? config.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (options.baseline_images > 0)
    result.baseline_images_per_sec = plain_loop_images_per_sec(dataset, config, options.baseline_images);
  if (options.seconds > 0) config.epochs = 0;

  train::Input input = train::make_input(dataset, config);
  result.shape = input.pool.shape().describe();
  graph::Pipeline pipe(input.pipeline_options);
  std::atomic<std::uint64_t> images{0}, batches{0};
  train::add_input(pipe, input, config)
      .sink("consume",
            [&](nodes::Batch batch) {
              images.fetch_add(batch.size(), std::memory_order_relaxed);
              batches.fetch_add(1, std::memory_order_relaxed);
            },
            {.capacity = config.prefetch});
  Tick tick;
  if (options.progress) tick = [&](double t) { options.progress(images.load(), t); };
  result.report = run_timed(pipe, options.seconds, std::chrono::milliseconds(200), tick).report;
  result.seconds = std::chrono::duration<double>(result.report.elapsed).count();
  result.images = images.load();
  result.batches = batches.load();
  result.files_read = result.report.produced;
  result.skipped_count = result.report.skipped;
  result.skipped = train::name_skips(result.report, input, config);
  result.left_out = train::left_out_of(*dataset);
  result.network = dataset->network();
  result.bottleneck = train::network_or(result.busiest_stage(), result.report.stages, result.network);
  return result;
}

void to_json(nlohmann::ordered_json& json, const InputPipelineResult& r) {
  nlohmann::ordered_json skipped = nlohmann::ordered_json::array(), stages = skipped, decisions = skipped;
  for (const auto& s : r.skipped) skipped.push_back({{"file", s.file}, {"reason", s.reason}, {"epochs", s.epochs}});
  for (const auto& s : r.report.stages)
    stages.push_back({{"name", s.name}, {"items_out", s.items_out}, {"busy_pct", r.busy_pct(s)}});
  for (const auto& d : r.report.decisions) decisions.push_back(train::to_json(d));
  json = {{"bench", "pipeline"},
          {"images_per_sec", r.images_per_sec()},
          {"images", r.images},
          {"skipped", r.skipped_count},
          {"skipped_files", skipped},
          {"left_out", r.left_out.count},
          {"left_out_files", train::left_out_files_json(r.left_out)},
          {"network", train::network_json(r.network)},
          {"bottleneck", r.bottleneck},
          {"files_read", r.files_read},
          {"batches", r.batches},
          {"seconds", r.seconds},
          {"threads", r.threads},
          {"batch", r.batch_size},
          {"size", r.size},
          {"shape", r.shape},
          {"fuse", r.fuse},
          {"stages", stages}};
  if (r.baseline_images_per_sec > 0) {
    json["baseline_images_per_sec"] = r.baseline_images_per_sec;
    json["efficiency"] = r.efficiency();
  }
  json["autotune"] = r.autotune;
  json["max_in_flight"] = r.report.max_in_flight;
  json["decisions"] = decisions;
}

}  // namespace stoke::bench
