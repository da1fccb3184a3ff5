// RunRecorder: what `stoke train --report FILE.html` records during a run, and the page it writes;
// record_fit feeds one from fit()'s callbacks.
//
//   RunRecorder rec;
//   rec.begin_phase(now(), 1, "train");
//   ... every ~250 ms from the compute stage:  rec.sample(now(), images, pipe.stats(), gpu_busy);
//   rec.end_phase(now(), images, report);          // the phase's totals, skips and scheduler moves
//   rec.epoch({.epoch = 1, .train_loss = ..., ...});
//   rec.write_html("run.html", "stoke train", {{"model", "small_cnn"}, ...});
//
// The page is one self-contained HTML file (no network, no external script, font or style): its
// data is a JSON blob inside it, drawn as inline SVG by a small inline script. It shows
// throughput and GPU (or CPU compute) busy over time with the epochs marked and the scheduler's
// moves on the timeline, each stage's busy/starved/blocked over time and per phase, loss and
// accuracy per epoch, the settings, a summary, the skipped files and the files the datasets left
// out when they opened. When the script has drawn
// everything it sets <body data-rendered="ok"> (on a script error: "error", with the message
// shown on the page); scripts/check-report.sh renders a page headlessly and checks that mark.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <stoke/graph/decision.hpp>
#include <stoke/graph/stats.hpp>
#include <string>
#include <utility>
#include <vector>

#include "stoke/train/fit.hpp"
#include "stoke/train/input.hpp"

namespace stoke::train {

/// One stage over an interval, as fractions of that interval's wall time, defined as in
/// graph::print(RunReport) and the autotuner: `busy` is time inside the body divided by
/// (interval x the stage's concurrency limit), so 1 means every allowed call was running all the
/// time; `starved` (no input) and `blocked` (input, but no room downstream) are fractions of
/// wall time. The three need not sum to 1: the rest is time running below the limit, or idle
/// after the input closed. Each is clamped to [0, 1].
struct StageSample {
  std::string name;
  double busy = 0;
  double starved = 0;
  double blocked = 0;
};

/// Records a run (phases, samples, scheduler moves, epochs, skipped items) and writes it as an
/// HTML report. Memory is bounded: at most `max_samples` samples (when full, neighbours are merged
/// and later samples are combined in twos, fours, ...: the resolution halves), the first
/// `max_moves` scheduler moves, the first `max_skips` skipped files and the first `max_skips` files
/// the datasets left out (the rest are counted).
/// Thread-safe: sample() runs on the compute stage's thread while decision() may come from the
/// scheduler's.
class RunRecorder {
 public:
  /// One point of the timeline: the `interval` seconds that end at `seconds` (from the run's start).
  struct Sample {
    double seconds = 0;
    double interval = 0;
    int phase = 0;  ///< index into the phases, in the order begin_phase() was called
    double images_per_sec = 0;
    std::optional<double> gpu_busy;  ///< 0..1, when the caller knew it
    /// The busy fraction of the phase's compute stage (begin_phase's `compute_stage`), as
    /// EpochTotals::compute_busy measures a whole pass.
    double compute_busy = 0;
    std::vector<StageSample> stages;
  };
  struct EpochRow {
    int epoch = 0;  ///< from 1
    double train_loss = 0;
    double train_top1 = 0;           ///< 0..1
    std::optional<double> val_top1;  ///< 0..1; none without a validation pass
    std::optional<double> val_top5;
    double images_per_sec = 0;  ///< the training phase's
    double compute_busy = 0;    ///< 0..1
    std::uint64_t skipped = 0;
    /// Data-parallel runs (EpochSummary's): each rank's images/s, and the gradient all-reduce's
    /// seconds and the share of them hidden under backward (0..1).
    std::vector<double> rank_images_per_sec{};
    double allreduce_seconds = 0;
    double allreduce_hidden = 0;
  };

  /// `max_samples` >= 16, else std::invalid_argument.
  explicit RunRecorder(std::size_t max_samples = 4000, std::size_t max_moves = 5000, std::size_t max_skips = 1000);

  /// Starts a phase ("train", "evaluate") of epoch `epoch` (from 1) at `seconds` from the run's
  /// start. Each phase's counters start again from zero (a new pipeline, or a pass's own stats:
  /// record_fit gives the stages' work since the pass began, EpochTotals::report.stages).
  /// `compute_stage` names the stage whose busy fraction is the phase's compute busy (empty: the
  /// stage named as the phase, as run_epoch names its compute stage after PassOptions::stage); a
  /// sample without a stage of that name takes the pipeline's last stage.
  void begin_phase(double seconds, int epoch, std::string phase, std::string compute_stage = {});

  /// Records the interval since the previous sample (or the phase's start) from the pipeline's
  /// snapshot: per-stage times since the phase began (Pipeline::stats() of a pipeline made for the
  /// phase, or a pass's EpochTotals::report.stages), and the images done
  /// in this phase so far. `gpu_busy`: the GPU's utilization 0..1 when known (NVML). A sample not
  /// later than the previous one is ignored; one before any begin_phase() opens a phase "run".
  /// Called from inside the sink's body (as run_epoch's progress callback is), the sink's busy
  /// time lacks the call in progress (a call is counted when it ends), so one interval's compute
  /// busy can read low and the next one's high by up to one batch step; the phase's totals agree.
  void sample(double seconds, std::int64_t images, const std::vector<graph::StageStats>& stages,
              std::optional<double> gpu_busy = std::nullopt);

  /// A scheduler move at `seconds` from the run's start (from AutotuneOptions::on_decision).
  void decision(double seconds, const graph::Decision& d);

  /// Ends the phase at `seconds` with `images` done: a last sample from the report's final
  /// counters, the phase's per-stage totals, its skipped files, and its scheduler moves from
  /// report.decisions -- unless decision() was called during the phase, when those are already
  /// recorded. The skipped files are `files` (name_skips of the report, as EpochTotals has them),
  /// else report.skipped_items named by their position ("item 17"); the page lists each file once
  /// with the phases it was skipped in, and counts report.skipped.
  void end_phase(double seconds, std::int64_t images, const graph::RunReport& report,
                 const std::vector<SkippedFile>& files = {});

  void epoch(const EpochRow& row);

  /// What `dataset` (its path, for the page) left out when it opened (left_out_of: never read),
  /// listed in the page's "Left out of the dataset" table, apart from the skipped files: every
  /// item counted, the first `max_skips` of all the datasets given listed. Call it once per
  /// dataset (a run's training and validation sets).
  void left_out(const std::string& dataset, const LeftOut& files);

  /// What the training set has read over the network so far (remote shards): the page's cards
  /// show the bytes, the time waiting and the shard cache's hits. The last call counts.
  void network(const nodes::NetworkStats& stats);

  /// Writes the page atomically (a temporary file next to `path`, renamed over it). `settings`
  /// become the settings table, in order. Throws std::runtime_error naming `path` when it cannot.
  void write_html(const std::filesystem::path& path, const std::string& title,
                  const std::vector<std::pair<std::string, std::string>>& settings) const;

  /// The page as a string (what write_html writes).
  std::string html(const std::string& title, const std::vector<std::pair<std::string, std::string>>& settings) const;

  std::vector<Sample> samples() const;
  std::size_t max_samples() const noexcept { return max_samples_; }

 private:
  struct Phase {
    int epoch = 0;
    std::string name;
    std::string compute_stage;  ///< the stage whose busy is the samples' compute_busy
    double start = 0;
    double end = -1;  ///< < start while running
    std::int64_t images = 0;
    std::vector<StageSample> totals;  ///< from end_phase's report
    std::vector<int> concurrency;     ///< each stage's limit at the end
    bool stopped = false;
    bool live_decisions = false;  ///< decision() was called during it
  };
  struct Counters {
    std::string name;
    std::int64_t busy = 0, starved = 0, blocked = 0;  ///< ns
  };
  struct Move {
    double seconds = 0;
    int phase = 0;
    graph::Decision decision;
  };
  struct Skip {
    std::string file;
    std::string reason;       ///< the first time's
    std::vector<int> phases;  ///< the phases it was skipped in, in order
  };
  struct LeftOutFile {
    std::string dataset;
    nodes::IgnoredFile file;
  };

  void begin_phase_locked(double seconds, int epoch, std::string phase, std::string compute_stage = {});
  void sample_locked(double seconds, std::int64_t images, const std::vector<graph::StageStats>& stages,
                     std::optional<double> gpu_busy);
  void push_locked(Sample sample);
  void record_skips_locked(int phase, const graph::RunReport& report, const std::vector<SkippedFile>& files);
  void halve_locked();
  /// The stored samples plus the one being combined (merged into the last when full).
  std::vector<Sample> all_samples_locked() const;
  /// The page's data: the JSON blob its script draws (report_page.cpp).
  std::string json_locked() const;
  /// The page's parts (report_page.cpp): the summary cards (and whether the GPU's busy is known),
  /// the tables of epochs, scheduler moves and skipped files.
  std::vector<std::pair<std::string, std::string>> cards_locked(bool& gpu) const;
  std::string epochs_table_locked() const;
  std::string moves_table_locked() const;
  std::string skips_table_locked() const;
  std::string left_out_table_locked() const;

  const std::size_t max_samples_;
  const std::size_t max_moves_;
  const std::size_t max_skips_;
  mutable std::mutex mutex_;
  std::vector<Phase> phases_;
  std::vector<Sample> samples_;
  std::optional<Sample> pending_;  ///< raw samples being combined up to `stride_`
  std::size_t pending_count_ = 0;
  std::size_t stride_ = 1;  ///< raw samples per stored sample: doubles at each halving
  // The phase's previous snapshot, from which the next sample's interval is measured.
  double last_seconds_ = 0;
  std::int64_t last_images_ = 0;
  std::vector<Counters> last_counters_;
  std::vector<Move> moves_;
  std::uint64_t moves_total_ = 0;
  std::vector<Skip> skips_;         ///< each file once; at most max_skips_
  std::uint64_t skips_total_ = 0;   ///< every skip, one per file and phase
  std::uint64_t skips_listed_ = 0;  ///< the skips that skips_ lists
  std::vector<LeftOutFile> left_out_;  ///< at most max_skips_
  std::uint64_t left_out_total_ = 0;   ///< every item the datasets left out, listed or not
  std::optional<nodes::NetworkStats> network_;
  std::vector<EpochRow> epochs_;
};

/// How record_fit writes the page of a fit() run.
struct FitRecording {
  /// Rewritten after every epoch (RunRecorder::write_html); empty: never written.
  std::filesystem::path html{};
  std::string title = "stoke train";
  std::vector<std::pair<std::string, std::string>> settings{};  ///< the settings table, in order
  /// The GPU's utilization 0..1 when known (e.g. from gpu::NvmlMonitor); empty: not known.
  std::function<std::optional<double>()> gpu_busy{};
  /// What the training set has read over the network (Dataset::network), recorded before each
  /// write; empty, or nullopt from it: nothing (local data).
  std::function<std::optional<nodes::NetworkStats>()> network{};
};

/// `callbacks` with `recorder` fed from them: a phase per pass, a sample per progress call, the
/// phase's totals when it ends, a row per epoch and the page rewritten after it. Seconds count from
/// this call. `callbacks`' own hooks still run, each after the recorder's part; `recorder` must
/// outlive the fit() that uses the result.
FitCallbacks record_fit(RunRecorder& recorder, FitCallbacks callbacks, FitRecording recording);

}  // namespace stoke::train
