// The input pipeline's throughput on a dataset (`stoke bench pipeline`): stoke::train's read ->
// decode + augment -> batch into a counting sink, with each stage's busy time, the files it
// skipped and the scheduler's moves; optionally against the same work in a plain one-thread loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <stoke/graph/stats.hpp>
#include <stoke/nodes/dataset.hpp>
#include <stoke/train/input.hpp>
#include <string>
#include <vector>

namespace stoke::bench {

struct InputPipelineOptions {
  /// Run this long, then stop (the epochs are then unlimited); 0: config.epochs' worth.
  double seconds = 0;
  /// First time this many images (after a few to warm up) in a plain one-thread loop; 0: none.
  std::size_t baseline_images = 0;
  /// Called every 200 ms during the pipelined run, from a side thread: images so far, seconds.
  std::function<void(std::uint64_t images, double seconds)> progress{};
};

struct InputPipelineResult {
  std::size_t batch_size = 0;  ///< the config's, as run
  int size = 0;
  std::string shape{};  ///< the batches' BatchShape::describe(): pixels, mask and targets
  bool fuse = true;
  bool autotune = false;
  std::uint64_t images = 0;  ///< images that reached the sink
  std::uint64_t batches = 0;
  std::uint64_t files_read = 0;  ///< items the source produced: images + skipped
  double seconds = 0;            ///< the run's elapsed time (RunReport::elapsed)
  std::uint64_t skipped_count = 0;
  std::vector<train::SkippedFile> skipped{};  ///< the skipped files named (up to max_listed_skips)
  /// What the dataset left out when it opened (Dataset::ignored()): never read, not in files_read.
  train::LeftOut left_out{};
  /// What the dataset read over the network (remote shards); nullopt for local data.
  std::optional<nodes::NetworkStats> network{};
  /// The busiest stage for its concurrency, or "network" when that is the read stage waiting on it.
  std::string bottleneck{};
  graph::RunReport report{};                  ///< per-stage stats, the scheduler's moves
  int threads = 0;                            ///< config.threads, or the cores when 0
  double baseline_images_per_sec = 0;         ///< the plain loop's rate; 0 without one

  double images_per_sec() const noexcept;
  /// images_per_sec() / (threads x the loop's rate): 1.0 is perfect scaling; 0 without a loop.
  double efficiency() const noexcept;
  /// A stage's busy time as a share of its final concurrency (the scheduler may have moved it)
  /// over the run, in percent.
  double busy_pct(const graph::StageStats& stage) const noexcept;
  /// The stage with the highest busy_pct ("" without stages).
  std::string busiest_stage() const;
};

/// The result as one JSON object (`stoke bench pipeline --json`): "bench":"pipeline", the counts,
/// the skipped files, what the dataset left out when it opened (left_out, left_out_files), the
/// setup, each stage's items out and busy_pct, the baseline and efficiency (when measured), the
/// scheduler's final in-flight limit and moves.
void to_json(nlohmann::ordered_json& json, const InputPipelineResult& result);

/// Runs train::make_input(dataset, config) into a sink that counts images and batches, after the
/// baseline loop when options.baseline_images > 0. OpenCV runs one thread per call meanwhile (the
/// pipeline runs images in parallel; cv::setNumThreads is restored after), so run one benchmark at
/// a time. Throws what the input pipeline throws (with config.on_error = fail: graph::StageError
/// naming the file).
InputPipelineResult measure_input_pipeline(const nodes::DatasetPtr& dataset, train::InputConfig config,
                                           const InputPipelineOptions& options = {});

/// The same work without the framework: one thread reads, decodes + augments and copies into a
/// batch slot, `images` times (fewer when an epoch is shorter), the first few untimed. Images per
/// second of the rest; files that fail cost their time but are not counted.
double plain_loop_images_per_sec(const nodes::DatasetPtr& dataset, const train::InputConfig& config,
                                 std::size_t images);

}  // namespace stoke::bench
