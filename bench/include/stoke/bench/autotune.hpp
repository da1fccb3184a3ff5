// Does the scheduler find a good setting by itself (`stoke bench autotune`)? stoke::train's input
// pipeline (read -> decode + augment -> batch) feeds a simulated accelerator that takes a fixed
// time per batch. A sweep of static settings finds the best one; then runs with the scheduler on
// start from the worst (one call per stage, one batch in flight), alternated with runs of the
// best static setting, and each is judged against the static runs beside it: how close it comes,
// how soon it reaches 95% of it, how busy it keeps the accelerator.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <stoke/graph/decision.hpp>
#include <stoke/graph/stats.hpp>
#include <stoke/nodes/dataset.hpp>
#include <string>
#include <vector>

namespace stoke::bench {

struct AutotuneBenchOptions {
  std::size_t batch = 32;      ///< images per batch
  int size = 128;              ///< output side in pixels
  double compute_ms = 2;       ///< the simulated accelerator's time per batch
  double seconds = 12;         ///< each run with the scheduler
  double sweep_seconds = 2.5;  ///< each static run of the sweep (measured after a warm-up of 0.5 s at most)
  int repeats = 3;             ///< runs with the scheduler; the figures are their medians
  int max_concurrency = 0;     ///< the most calls of read and decode, in the sweep and for the scheduler (0: 2 x cores)
  /// In-flight limits of the sweep, in batches, ascending; a decode count stops at the first that
  /// does not help.
  std::vector<std::size_t> sweep_depths{1, 2, 4, 8};
  std::chrono::milliseconds interval{200};  ///< the scheduler's interval between two looks at the stats
  std::uint64_t seed = 0;                   ///< of the shuffle and the augmentation
};

/// A static setting of the input stages: concurrency and the in-flight limit in batches.
struct StaticSetting {
  int read = 1;
  int decode = 1;
  std::size_t depth = 1;
};

/// "decode 2, read 1, in-flight 4 batches".
std::string describe(const StaticSetting& setting);

/// The sink's image count `t` seconds into a run.
struct RateSample {
  double t = 0;
  std::uint64_t images = 0;
};

/// Images/s in each whole second of a run sampled every 100 ms ({0, 0} first), from `from_s` on.
std::vector<double> rates_per_second(const std::vector<RateSample>& samples, double from_s);
/// The first t whose last second ([t - 1 s, t]) had at least `rate` images/s; NaN if none.
double seconds_to_reach(const std::vector<RateSample>& samples, double rate);

/// Images/s and the accelerator's busy share (0..1) over a stretch of a run. The rate is the median
/// of the stretch's whole seconds (their mean when fewer than 3): a second in which other work on
/// the machine took a core counts once.
struct Window {
  double from = 0, to = 0;  ///< seconds into the run (0 and 0 for a pool of runs)
  double rate = 0;
  double busy = 0;
  std::vector<double> second_rates{};
};

/// One run with the scheduler, judged against the best static setting's runs beside it.
struct AutotuneTrial {
  Window tuned{};                   ///< its second half
  std::vector<double> by_second{};  ///< images/s in each whole second of the run
  double best_static = 0;           ///< images/s: the mean of the static runs before and after
  double ratio = 0;                 ///< tuned.rate / best_static
  double to_95 = 0;                 ///< seconds to 95% of best_static; NaN when not reached
  graph::RunReport report{};        ///< the scheduler's moves, the final setting
};

/// The targets on 2 cores: ratio >= 0.95, reached within 10 s, and, when the accelerator is the
/// bottleneck of the best static setting (busy >= 90% there), busy >= 97% under the scheduler.
inline constexpr double target_ratio = 0.95;
inline constexpr double target_seconds = 10.0;
inline constexpr double target_busy = 0.97;
inline constexpr double bottleneck_busy = 0.9;

struct AutotuneTargets {
  bool ratio = false;
  bool fast = false;
  bool compute_bound = false;  ///< the best static run is limited by the accelerator
  bool busy = true;            ///< only judged when compute_bound
  bool met() const noexcept { return ratio && fast && busy; }
};

struct AutotuneBenchResult {
  AutotuneBenchOptions options{};  ///< as given
  std::size_t images = 0;          ///< in the dataset
  /// Whether the dataset is a GeneratedCorpus: the caller's to say (measure_autotune leaves it
  /// false); to_json reports it.
  bool generated = false;
  int cores = 0;                  ///< graph::usable_cores()
  int max_concurrency = 0;        ///< the option, or 2 x cores
  int settings = 0;               ///< static settings swept
  StaticSetting best{};           ///< the fastest (within 0.5%: fewer threads, less in flight)
  Window best_in_sweep{};         ///< its sweep run
  double static_seconds = 0;      ///< length of each static run beside the scheduler's
  std::vector<Window> statics{};  ///< those runs (repeats + 1)
  Window best_static{};           ///< pooled over them
  std::vector<AutotuneTrial> trials{};
  double ratio = 0;  ///< medians over the trials
  double to_95 = 0;  ///< NaN when the median run never got there
  double busy = 0;
  double images_per_sec = 0;
  std::size_t median_trial = 0;  ///< the trial whose ratio is the median: its moves are the ones to show
  AutotuneTargets targets{};
};

/// Progress of measure_autotune(), for a log. All but `decision` run on the calling thread.
struct AutotuneBenchCallbacks {
  std::function<void(const StaticSetting&, const Window&)> swept{};  ///< after each static run of the sweep
  std::function<void(int run)> run_starts{};                         ///< before scheduler run 1..repeats
  std::function<void(int run, const AutotuneTrial&)> run_ends{};     ///< after it and the static run beside it
  std::function<void(int run, const graph::Decision&)> decision{};   ///< each move, on the scheduler's thread
};

/// The result as one JSON object (`stoke bench autotune --json`): "bench":"autotune", the medians,
/// each run, the best static setting, the setup, the median run's moves and final setting, and
/// the targets. NaN figures (95% never reached) are null.
void to_json(nlohmann::ordered_json& json, const AutotuneBenchResult& result);

/// The sweep, then the scheduler's runs, on `dataset` (at least one item); about
/// settings x sweep_seconds + repeats x (seconds + seconds / 4 + 0.5) seconds. Throws
/// std::invalid_argument for options out of range, and what the input pipeline throws. Measures
/// the machine: run one benchmark at a time (OpenCV's thread count is set to 1 meanwhile).
AutotuneBenchResult measure_autotune(const nodes::DatasetPtr& dataset, const AutotuneBenchOptions& options,
                                     const AutotuneBenchCallbacks& callbacks = {});

/// The shapes dataset (nodes/shapes.hpp: 10 classes, no validation split) as JPEG files in a new
/// temporary folder, deleted with this object: a corpus for the benchmarks when none is given.
class GeneratedCorpus {
 public:
  /// About `images` images (rounded up to 10 classes) of `side` x `side` pixels. Throws
  /// std::runtime_error naming the folder when it cannot be created (set TMPDIR to a writable one).
  GeneratedCorpus(std::size_t images, int side);
  ~GeneratedCorpus();
  GeneratedCorpus(const GeneratedCorpus&) = delete;
  GeneratedCorpus& operator=(const GeneratedCorpus&) = delete;

  const std::filesystem::path& root() const noexcept { return root_; }
  /// The image folder: root()/train.
  std::filesystem::path train() const { return root_ / "train"; }

 private:
  std::filesystem::path root_{};
};

}  // namespace stoke::bench
