// `stoke bench autotune`: does the scheduler find a good setting by itself? The input pipeline
// (read -> decode+augment -> batch) feeds a simulated accelerator that takes a fixed time per
// batch. A sweep of static settings finds the best one; then a run with the scheduler on starts
// from the worst (one call per stage, one batch in flight) and is timed to reach the best
// setting's throughput, and what it settles at is compared with it.
#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <opencv2/core/utility.hpp>
#include <optional>
#include <sstream>
#include <stoke/graph/autotune.hpp>
#include <stoke/graph/completion.hpp>
#include <stoke/graph/pipeline.hpp>
#include <stoke/nodes/shapes.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// GCC 12 reports a false null dereference inside Boost.Program_options' typed_value<std::string>.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include "cli.hpp"
#pragma GCC diagnostic pop
#include <stoke/train/input.hpp>

#include "commands.hpp"
#include "json.hpp"
#include "median.hpp"

namespace stoke::app {

using namespace stoke::train;  // NOLINT(google-build-using-namespace): the commands are glue over it

namespace po = boost::program_options;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto sample_period = std::chrono::milliseconds(100);
constexpr double rate_window_s = 1.0;  // rate(t): images in [t - 1 s, t]
constexpr double target_ratio = 0.95;
constexpr double target_seconds = 10.0;
constexpr double target_busy = 0.97;
constexpr double bottleneck_busy = 0.9;  // the compute stage limits the best static setting
constexpr double tie_share = 0.005;      // static rates this close are the same

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// A stand-in for an accelerator: one thread serving a FIFO of batches, each occupying the device
// for `per_batch`. The device keeps its own clock (a batch starts when it arrives or when the
// previous one ends, whichever is later), so a late wake-up of its thread delays nothing that
// was already queued. The Batch is released (its slot goes back to the pool) before the
// Completion resolves. No pipeline thread waits on it.
class SimulatedDevice {
 public:
  explicit SimulatedDevice(std::chrono::nanoseconds per_batch) : per_batch_(per_batch), thread_([this] { serve(); }) {}
  ~SimulatedDevice() {
    {
      std::lock_guard lock(mutex_);
      closing_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  SimulatedDevice(const SimulatedDevice&) = delete;
  SimulatedDevice& operator=(const SimulatedDevice&) = delete;

  void submit(nodes::Batch batch, graph::Completion<std::size_t> done) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(Job{std::move(batch), std::move(done), Clock::now()});
    }
    cv_.notify_one();
  }

  /// Seconds the device was busy within [from, to].
  double busy_seconds(Clock::time_point from, Clock::time_point to) const {
    std::lock_guard lock(mutex_);
    Clock::duration busy{0};
    for (const auto& [begin, end] : spans_) {
      const auto a = std::max(begin, from), b = std::min(end, to);
      if (a < b) busy += b - a;
    }
    return std::chrono::duration<double>(busy).count();
  }

 private:
  struct Job {
    nodes::Batch batch;
    graph::Completion<std::size_t> done;
    Clock::time_point submitted;
  };

  void serve() {
    Clock::time_point free_at{};
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [this] { return closing_ || !queue_.empty(); });
      if (queue_.empty()) return;  // closing, and every job served
      Job job = std::move(queue_.front());
      queue_.pop_front();
      const auto begin = std::max(job.submitted, free_at);
      free_at = begin + per_batch_;
      spans_.emplace_back(begin, free_at);
      lock.unlock();
      std::this_thread::sleep_until(free_at);
      const std::size_t images = job.batch.size();
      job.batch = nodes::Batch{};
      job.done(images);
      lock.lock();
    }
  }

  const std::chrono::nanoseconds per_batch_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> spans_;
  bool closing_ = false;
  std::thread thread_;  // last: starts once the rest is constructed
};

// The sink's image count at `t` seconds from the start of a run.
struct Sample {
  double t = 0;
  std::uint64_t images = 0;
};

struct Run {
  graph::RunReport report;
  std::vector<Sample> samples;  // {0, 0}, then every 100 ms, the last at the stop
  Clock::time_point start;
};

// Runs `pipe` for `seconds`, sampling `images` every 100 ms on a side thread that stops the
// pipeline at the end.
Run run_sampled(graph::Pipeline& pipe, const std::atomic<std::uint64_t>& images, double seconds) {
  Run run;
  run.samples.push_back({0, 0});
  std::mutex mutex;
  std::condition_variable cv;
  bool ended = false;
  run.start = Clock::now();
  const auto end = run.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::thread sampler([&] {
    std::unique_lock lock(mutex);
    for (int k = 1;; ++k) {
      const auto next = std::min(run.start + k * sample_period, end);
      if (cv.wait_until(lock, next, [&] { return ended; })) return;  // the run ended first (an error)
      run.samples.push_back({seconds_between(run.start, Clock::now()), images.load()});
      if (next == end) {
        pipe.stop();
        return;
      }
    }
  });
  struct Joiner {  // also when run() throws
    std::mutex& mutex;
    std::condition_variable& cv;
    bool& ended;
    std::thread& thread;
    ~Joiner() {
      {
        std::lock_guard lock(mutex);
        ended = true;
      }
      cv.notify_all();
      thread.join();
    }
  } joiner{mutex, cv, ended, sampler};
  run.report = pipe.run();
  return run;
}

// The first sample at or after `t` (the last one when none is).
std::size_t sample_at(const std::vector<Sample>& samples, double t) {
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].t >= t - 1e-3) return i;
  }
  return samples.size() - 1;
}

// Images/s and the compute stage's busy share between two samples of a run. The rate is the
// median of the window's whole seconds (the mean when it has fewer than 3): a second in which a
// neighbour on this shared machine took a core does not count for more than one.
struct Window {
  double from = 0, to = 0;
  double rate = 0;
  double busy = 0;
  std::vector<double> second_rates;  // images/s in each whole second of the window
};

// Images/s in each whole second of a run from `from_s` on.
std::vector<double> second_rates(const Run& run, double from_s) {
  std::vector<double> rates;
  const double end = run.samples.back().t;
  for (double t = run.samples[sample_at(run.samples, from_s)].t; t + rate_window_s <= end + 1e-3; t += rate_window_s) {
    const Sample& x = run.samples[sample_at(run.samples, t)];
    const Sample& y = run.samples[sample_at(run.samples, t + rate_window_s)];
    if (y.t > x.t) rates.push_back(static_cast<double>(y.images - x.images) / (y.t - x.t));
  }
  return rates;
}

Window window(const Run& run, const SimulatedDevice& device, double from_s) {
  const Sample& a = run.samples[sample_at(run.samples, from_s)];
  const Sample& b = run.samples.back();
  Window w{a.t, b.t, 0, 0, {}};
  if (b.t <= a.t) return w;
  w.second_rates = second_rates(run, from_s);
  w.rate = w.second_rates.size() >= 3 ? median(w.second_rates) : static_cast<double>(b.images - a.images) / (b.t - a.t);
  const auto at = [&](double t) {
    return run.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t));
  };
  w.busy = device.busy_seconds(at(a.t), at(b.t)) / (b.t - a.t);
  return w;
}

/// Runs of the same setting as one: the median of all their seconds; the busy share weighted by
/// each window's length. (`from` and `to` stay 0: the windows are not one stretch of time.)
Window pooled(const std::vector<Window>& windows) {
  Window w;
  double busy_seconds = 0, seconds = 0;
  for (const Window& x : windows) {
    w.second_rates.insert(w.second_rates.end(), x.second_rates.begin(), x.second_rates.end());
    busy_seconds += x.busy * (x.to - x.from);
    seconds += x.to - x.from;
  }
  w.rate = median(w.second_rates);
  w.busy = seconds > 0 ? busy_seconds / seconds : 0;
  return w;
}

// The first t with images in [t - 1 s, t] >= rate x 1 s; NaN if none.
double seconds_to_reach(const std::vector<Sample>& samples, double rate) {
  for (std::size_t j = 0; j < samples.size(); ++j) {
    if (samples[j].t < rate_window_s - 1e-3) continue;
    const Sample& a = samples[sample_at(samples, samples[j].t - rate_window_s)];
    const Sample& b = samples[j];
    if (b.t > a.t && static_cast<double>(b.images - a.images) / (b.t - a.t) >= rate) return b.t;
  }
  return std::nan("");
}

// A static setting of the input stages: concurrency and the in-flight limit in batches.
struct Setting {
  int read = 1;
  int decode = 1;
  std::size_t depth = 1;
};

std::string describe(const Setting& s) {
  return "decode " + std::to_string(s.decode) + ", read " + std::to_string(s.read) + ", in-flight " +
         std::to_string(s.depth) + " batch" + (s.depth == 1 ? "" : "es");
}

// The input pipeline's config for a static setting (no scheduler).
InputConfig fixed(const InputConfig& base, const Setting& s) {
  InputConfig config = base;
  config.autotune = false;
  config.read_concurrency = graph::Concurrency{s.read, s.read, s.read};
  config.decode_concurrency = graph::Concurrency{s.decode, s.decode, s.decode};
  config.in_flight = s.depth * base.batch_size;
  return config;
}

struct Measured {
  Run run;
  Window converged;
};

// One run with the scheduler, judged against the best static setting's runs beside it.
struct Trial {
  Window tuned;                   // its second half
  std::vector<double> by_second;  // images/s in each whole second of the run
  double best_static = 0;         // images/s
  double ratio = 0;
  double to_95 = 0;  // seconds; NaN when not reached
  graph::RunReport report;
};

// One run of the whole pipeline: input -> compute (the simulated device) -> count.
Measured measure(const InputConfig& config, const nodes::DatasetPtr& dataset, std::chrono::nanoseconds per_batch,
                 double seconds, double measure_from_s) {
  Input input = make_input(dataset, config);
  SimulatedDevice device(per_batch);
  std::atomic<std::uint64_t> images{0};
  graph::Pipeline pipe(input.pipeline_options);  // destroyed first: its stages refer to the above
  // Two operations outstanding, fixed: the next batch is queued on the device when one ends.
  graph::StageOptions compute{.concurrency = graph::Concurrency{2, 2, 2}, .capacity = 2};
  add_input(pipe, input, config)
      .async<std::size_t>(
          "compute",
          [&device](nodes::Batch batch, graph::Completion<std::size_t> done) {
            device.submit(std::move(batch), std::move(done));
          },
          compute)
      .sink("count", [&images](std::size_t n) { images.fetch_add(n, std::memory_order_relaxed); });
  Measured m{run_sampled(pipe, images, seconds), {}};
  m.converged = window(m.run, device, measure_from_s);
  return m;
}

// The shapes dataset as JPEG files in a temporary folder, deleted with this object.
class GeneratedCorpus {
 public:
  GeneratedCorpus(std::size_t images, int side) {
    std::string pattern = (fs::temp_directory_path() / "stoke-bench-autotune-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("cannot create a temporary folder like " + pattern +
                               " for the generated corpus (set TMPDIR, or give --data)");
    }
    root_ = pattern;
    nodes::ShapesDatasetOptions options;
    options.out = root_;
    options.classes = 10;
    options.train_per_class = std::max<std::size_t>(1, (images + 9) / 10);
    options.val_per_class = 0;
    options.size = side;
    try {
      nodes::write_shapes_dataset(options);
    } catch (...) {
      remove();
      throw;
    }
  }
  ~GeneratedCorpus() { remove(); }
  GeneratedCorpus(const GeneratedCorpus&) = delete;
  GeneratedCorpus& operator=(const GeneratedCorpus&) = delete;

  const fs::path& root() const noexcept { return root_; }
  fs::path train() const { return root_ / "train"; }

 private:
  void remove() noexcept {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }
  fs::path root_;
};

// "1,2,4,8" -> {1, 2, 4, 8}; nullopt unless every entry is a positive integer.
std::optional<std::vector<std::size_t>> parse_depths(const std::string& text) {
  std::vector<std::size_t> depths;
  std::stringstream in(text);
  std::string entry;
  while (std::getline(in, entry, ',')) {
    if (entry.empty() || entry.find_first_not_of("0123456789") != std::string::npos || entry.size() > 6) {
      return std::nullopt;
    }
    const auto depth = static_cast<std::size_t>(std::stoul(entry));
    if (depth == 0) return std::nullopt;
    depths.push_back(depth);
  }
  if (depths.empty()) return std::nullopt;
  std::sort(depths.begin(), depths.end());
  depths.erase(std::unique(depths.begin(), depths.end()), depths.end());
  return depths;
}

std::string decision_line(const graph::Decision& d) {
  std::ostringstream line;
  graph::print(line, d);
  return line.str();
}

struct Targets {
  bool ratio = false;
  bool fast = false;
  bool compute_bound = false;  // the best static run is limited by the compute stage
  bool busy = true;            // only judged when compute_bound
  bool met() const { return ratio && fast && busy; }
};

const char* yes_no(bool b) { return b ? "yes" : "NO"; }

}  // namespace

int bench_autotune(int argc, char** argv) {
  std::string data, depths_text = "1,2,4,8";
  std::size_t batch = 32, corpus_images = 500;
  int size = 128, interval_ms = 200, corpus_side = 320, max_concurrency = 0;
  double compute_ms = 2, seconds = 12, sweep_seconds = 2.5;
  int repeats = 3;
  std::uint64_t seed = 0;
  bool json = false;
  CommandOptions cli("bench autotune",
                     "Measures stoke's scheduler (--autotune in the other commands). The pipeline: the input stages\n"
                     "(read -> decode + random resized crop, flip, normalize -> batch) on a JPEG corpus, then a\n"
                     "simulated accelerator that takes --compute-ms per batch (on its own thread, queue of 2),\n"
                     "then a counter. Two things run on it:\n"
                     "  (b) a sweep of static settings: decode concurrency 1..--max-concurrency (default 2 x cores;\n"
                     "      read 1, or 2 when decode exceeds the cores), in-flight limit --sweep-depths batches'\n"
                     "      worth, each for --sweep-seconds (measured after a warm-up of 0.5 s at most); the fastest\n"
                     "      is kept (within 0.5%, the one with fewer threads and less in flight);\n"
                     "  (a) the scheduler from the worst start (read 1, decode 1, one batch in flight), its target\n"
                     "      the compute stage, --repeats times for --seconds, alternated with runs of the best\n"
                     "      static setting (b a b a ... b), so that each (a) is compared with the (b) beside it:\n"
                     "      this machine's speed drifts.\n"
                     "For each (a) it prints the throughput over its second half and the ratio to (b) (each rate\n"
                     "the median of whole seconds, so that a second disturbed by other work counts once), the time\n"
                     "to reach 95% of (b) (images in the last second: 1 s at the earliest) and the compute stage's\n"
                     "busy share (the simulated device's); then the medians over the runs, and the moves of the\n"
                     "median run. The targets (on 2 cores): ratio >= 0.95, reached within 10 s, and, when compute\n"
                     "is the bottleneck at the best static setting (busy >= 90% there), busy >= 97% under the\n"
                     "scheduler. The default --compute-ms leaves the input stages the bottleneck; a large one\n"
                     "(e.g. 10) makes compute the bottleneck. Without --data a corpus of shapes is generated in a\n"
                     "temporary folder and deleted at the end.\n\n"
                     "  stoke bench autotune\n"
                     "  stoke bench autotune --compute-ms 10 --json",
                     "[options]");
  cli.add()("data", po::value(&data),
            "an image folder, a .stoke pack, a path,label list file, or a CIFAR folder (default: a generated corpus)")(
      "corpus-images", po::value(&corpus_images)->default_value(corpus_images),
      "without --data: images in the generated corpus")(
      "corpus-side", po::value(&corpus_side)->default_value(corpus_side),
      "without --data: width and height of the generated images, pixels")(
      "batch", po::value(&batch)->default_value(batch), "images per batch")(
      "size", po::value(&size)->default_value(size), "output side in pixels")(
      "compute-ms", po::value(&compute_ms)->default_value(compute_ms),
      "the simulated accelerator's time per batch, milliseconds")(
      "seconds", po::value(&seconds)->default_value(seconds), "length of each run with the scheduler")(
      "repeats", po::value(&repeats)->default_value(repeats),
      "runs with the scheduler, alternated with runs of the best static setting; medians are reported")(
      "max-concurrency", po::value(&max_concurrency)->default_value(0),
      "the most concurrent calls of read and decode, in the sweep and for the scheduler (0: 2 x cores)")(
      "sweep-seconds", po::value(&sweep_seconds)->default_value(sweep_seconds), "length of each static run")(
      "sweep-depths", po::value(&depths_text)->default_value(depths_text),
      "in-flight limits of the sweep, in batches, comma-separated (a decode count stops at the first "
      "depth that does not help)")("interval-ms", po::value(&interval_ms)->default_value(interval_ms),
                                   "the scheduler's interval between two looks at the stats")(
      "seed", po::value(&seed)->default_value(seed), "seed of the shuffle and the augmentation")(
      "json", po::bool_switch(&json), "print one JSON line instead of the summary");
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (!std::isfinite(compute_ms) || compute_ms <= 0 || compute_ms > 60000)
    return cli.usage_error("--compute-ms must be a time per batch in (0, 60000] milliseconds");
  if (!std::isfinite(seconds) || seconds <= 0 || seconds > 86400) return cli.usage_error("--seconds must be positive");
  if (!std::isfinite(sweep_seconds) || sweep_seconds <= 0 || sweep_seconds > 86400)
    return cli.usage_error("--sweep-seconds must be positive");
  if (batch == 0 || size <= 0) return cli.usage_error("--batch and --size must be positive");
  if (interval_ms <= 0) return cli.usage_error("--interval-ms must be positive");
  if (repeats < 1 || repeats > 100) return cli.usage_error("--repeats must be in 1..100");
  if (max_concurrency < 0) return cli.usage_error("--max-concurrency must be >= 0");
  if (corpus_images == 0 || corpus_side < 16 || corpus_side > 4096)
    return cli.usage_error("--corpus-images must be positive and --corpus-side in 16..4096");
  const auto depths = parse_depths(depths_text);
  if (!depths) return cli.usage_error("--sweep-depths must be positive integers separated by commas, e.g. 1,2,4,8");

  const int cores = graph::usable_cores();
  const int most = max_concurrency > 0 ? max_concurrency : 2 * cores;
  cv::setNumThreads(1);  // images run in parallel; OpenCV's own threads would only compete

  std::optional<GeneratedCorpus> corpus;
  if (data.empty()) {
    const auto begin = Clock::now();
    corpus.emplace(corpus_images, corpus_side);
    data = corpus->train().string();
    std::fprintf(stderr, "bench autotune: generated %zu JPEGs (%dx%d shapes) in %s in %.1f s; deleted at the end\n",
                 corpus_images, corpus_side, corpus_side, corpus->root().c_str(), seconds_between(begin, Clock::now()));
  }
  const nodes::DatasetPtr dataset = open_dataset(data);
  if (dataset->size() == 0) throw std::runtime_error(data + ": the dataset is empty");

  InputConfig base;
  base.batch_size = batch;
  base.size = size;
  base.epochs = 0;  // repeat until stopped
  base.seed = seed;
  // 8 pool slots: more batches than can be out at once (compute's queue of 2, 2 on the device, one
  // being filled), so the batch stage never waits for a slot.
  base.prefetch = 6;
  const auto per_batch =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double, std::milli>(compute_ms));

  // (b) the sweep.
  const double warmup = std::min(0.5, sweep_seconds / 4);
  std::optional<Setting> best;
  Window best_in_sweep;
  int settings = 0;
  for (int decode = 1; decode <= most; ++decode) {
    double previous = 0;
    for (const std::size_t depth : *depths) {
      const Setting s{decode > cores ? 2 : 1, decode, depth};
      const Window w = measure(fixed(base, s), dataset, per_batch, sweep_seconds, warmup).converged;
      ++settings;
      std::fprintf(stderr, "bench autotune: static %-40s %8.1f images/s, compute busy %5.1f%%\n", describe(s).c_str(),
                   w.rate, 100 * w.busy);
      // Near-ties go to the setting found first: fewer threads, less memory.
      if (!best || w.rate > best_in_sweep.rate * (1 + tie_share)) {
        best = s;
        best_in_sweep = w;
      }
      if (w.rate < previous * 1.02) break;  // a deeper queue stopped helping this decode count
      previous = std::max(previous, w.rate);
    }
  }

  // (a) the scheduler from the worst start.
  InputConfig config = base;
  config.autotune = true;
  config.read_concurrency = graph::parallel(1, most, 1);
  config.decode_concurrency = graph::parallel(1, most, 1);
  config.in_flight = batch;
  config.tuning.target = "compute";
  config.tuning.max_in_flight = 8 * batch;
  config.tuning.interval = std::chrono::milliseconds(interval_ms);
  int run_number = 0;
  if (!json) {
    config.tuning.on_decision = [&run_number](const graph::Decision& d) {
      std::fprintf(stderr, "autotune %d: %s\n", run_number, decision_line(d).c_str());
    };
  }

  // The best of a dozen short, noisy runs is biased up, and this machine's speed drifts (it is
  // shared): the best static setting is run again between the scheduler's runs, b a b a b ...,
  // each (a) is compared with the mean of the two (b) beside it, and the figures are the medians
  // over the repeats.
  const double again = seconds / 4 + warmup;
  std::vector<Window> statics{measure(fixed(base, *best), dataset, per_batch, again, warmup).converged};
  std::vector<Trial> trials;
  for (run_number = 1; run_number <= repeats; ++run_number) {
    if (!json)
      std::fprintf(stderr, "bench autotune: scheduler run %d of %d from %s, for %.1f s\n", run_number, repeats,
                   describe({1, 1, 1}).c_str(), seconds);
    Measured tuned = measure(config, dataset, per_batch, seconds, seconds / 2);
    statics.push_back(measure(fixed(base, *best), dataset, per_batch, again, warmup).converged);
    Trial t;
    t.tuned = tuned.converged;
    t.by_second = second_rates(tuned.run, 0);
    t.best_static = (statics[statics.size() - 2].rate + statics.back().rate) / 2;
    t.ratio = t.best_static > 0 ? t.tuned.rate / t.best_static : std::nan("");
    t.to_95 = seconds_to_reach(tuned.run.samples, target_ratio * t.best_static);
    t.report = std::move(tuned.run.report);
    std::fprintf(stderr,
                 "bench autotune: run %d: %.1f images/s = %.3f x best static (%.1f, the runs beside it); 95%% after "
                 "%.1f s; compute busy %.1f%%\n",
                 run_number, t.tuned.rate, t.ratio, t.best_static, t.to_95, 100 * t.tuned.busy);
    trials.push_back(std::move(t));
  }
  const Window best_window = pooled(statics);
  const double best_rate = best_window.rate;
  const auto median_of = [&](auto field) {
    std::vector<double> picked;
    for (const Trial& t : trials) picked.push_back(field(t));
    return median(std::move(picked));
  };
  // Never reached counts as the slowest.
  const double to_95_median = median_of([](const Trial& t) { return std::isfinite(t.to_95) ? t.to_95 : HUGE_VAL; });
  const double to_95 = std::isfinite(to_95_median) ? to_95_median : std::nan("");
  const double ratio = median_of([](const Trial& t) { return t.ratio; });
  const double busy = median_of([](const Trial& t) { return t.tuned.busy; });
  const double tuned_rate = median_of([](const Trial& t) { return t.tuned.rate; });
  // The run whose ratio is the median: its moves and final setting are the ones shown.
  const Trial& shown = *std::min_element(trials.begin(), trials.end(), [&](const Trial& x, const Trial& y) {
    return std::abs(x.ratio - ratio) < std::abs(y.ratio - ratio);
  });
  const graph::RunReport& report = shown.report;

  Targets targets;
  targets.ratio = ratio >= target_ratio;
  targets.fast = std::isfinite(to_95) && to_95 <= target_seconds;
  targets.compute_bound = best_window.busy >= bottleneck_busy;
  targets.busy = !targets.compute_bound || busy >= target_busy;

  if (json) {
    Json j;
    j.field("bench", "autotune");
    j.field("ratio_to_best_static", ratio);
    j.field("seconds_to_95pct", to_95);  // null when not reached
    j.field("compute_busy", busy);
    j.field("autotune_images_per_sec", tuned_rate);
    j.field("repeats", repeats);
    j.begin_array("runs");
    for (const Trial& t : trials) {
      j.begin_object();
      j.field("ratio_to_best_static", t.ratio);
      j.field("seconds_to_95pct", t.to_95);
      j.field("compute_busy", t.tuned.busy);
      j.field("images_per_sec", t.tuned.rate);
      j.field("best_static_images_per_sec", t.best_static);
      j.begin_array("images_per_sec_by_second");
      for (const double rate : t.by_second) j.value(rate);
      j.end_array();
      j.end_object();
    }
    j.end_array();
    j.field("best_static_images_per_sec", best_rate);
    j.field("best_static_compute_busy", best_window.busy);
    j.field("best_static_sweep_images_per_sec", best_in_sweep.rate);
    j.begin_object("best_static");
    j.field("decode", best->decode);
    j.field("read", best->read);
    j.field("in_flight", static_cast<std::uint64_t>(best->depth * batch));
    j.end_object();
    j.field("static_settings", settings);
    j.field("compute_ms", compute_ms);
    j.field("batch", static_cast<std::uint64_t>(batch));
    j.field("size", size);
    j.field("cores", cores);
    j.field("images", static_cast<std::uint64_t>(dataset->size()));
    j.field("generated", corpus.has_value());
    j.field("seconds", seconds);
    j.field("sweep_seconds", sweep_seconds);
    j.field("decisions", static_cast<std::uint64_t>(report.decisions.size()));
    j.begin_object("final");
    for (const auto& s : report.stages) j.field(s.name, s.concurrency);
    j.field("in_flight", static_cast<std::uint64_t>(report.max_in_flight));
    j.end_object();
    j.field("compute_bound", targets.compute_bound);
    j.field("targets_met", targets.met());
    std::cout << j.str() << '\n';
    return 0;
  }

  std::printf("bench autotune: %zu images%s, batch %zu, %dx%d, compute %.1f ms/batch, %d cores\n", dataset->size(),
              corpus ? " (generated)" : "", batch, size, size, compute_ms, cores);
  std::printf("  (b) best static of %d settings: %s (%zu items)\n", settings, describe(*best).c_str(),
              best->depth * batch);
  std::printf(
      "      %.1f images/s (median second of %zu runs of %.1f s around (a)'s), compute busy %.1f%% "
      "(in the sweep: %.1f)\n",
      best_rate, statics.size(), again, 100 * best_window.busy, best_in_sweep.rate);
  std::printf("  (a) scheduler from %s, %d runs of %.1f s, each judged on its second half:\n",
              describe({1, 1, 1}).c_str(), repeats, seconds);
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const Trial& t = trials[i];
    std::printf("      run %zu: %.1f images/s = %.3f x best static beside it (%.1f), compute busy %.1f%%, ", i + 1,
                t.tuned.rate, t.ratio, t.best_static, 100 * t.tuned.busy);
    if (std::isfinite(t.to_95))
      std::printf("95%% after %.1f s\n", t.to_95);
    else
      std::printf("95%% not reached\n");
  }
  std::printf("      median: %.3f x best static, compute busy %.1f%%, ", ratio, 100 * busy);
  if (std::isfinite(to_95))
    std::printf("95%% of best static after %.1f s\n", to_95);
  else
    std::printf("95%% of best static not reached\n");
  std::printf("      final setting of the median run:");
  for (const auto& s : report.stages) {
    if (s.kind != graph::StageKind::source && s.kind != graph::StageKind::sink)
      std::printf(" %s %d,", s.name.c_str(), s.concurrency);
  }
  std::printf(" in-flight %zu items (%.1f batches)\n", report.max_in_flight,
              static_cast<double>(report.max_in_flight) / static_cast<double>(batch));
  std::printf("  scheduler:");
  if (report.decisions.empty()) {
    std::printf(" no moves\n");
  } else {
    std::printf(" %zu move%s\n", report.decisions.size(), report.decisions.size() == 1 ? "" : "s");
    for (const auto& d : report.decisions) std::printf("    %s\n", decision_line(d).c_str());
  }
  std::printf("  targets %s: ratio >= %.2f %s (%.3f); 95%% within %.0f s %s", targets.met() ? "met" : "NOT met",
              target_ratio, yes_no(targets.ratio), ratio, target_seconds, yes_no(targets.fast));
  if (std::isfinite(to_95)) std::printf(" (%.1f s)", to_95);
  if (targets.compute_bound) {
    std::printf("; compute busy >= %.0f%% %s (%.1f%%)\n", 100 * target_busy, yes_no(targets.busy), 100 * busy);
  } else {
    std::printf("; compute busy: not judged (the input is the bottleneck: compute busy %.0f%% at the best static)\n",
                100 * best_window.busy);
  }
  return 0;
}

}  // namespace stoke::app
