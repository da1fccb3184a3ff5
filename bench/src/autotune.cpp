#include "stoke/bench/autotune.hpp"

#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <stoke/graph/autotune.hpp>
#include <stoke/graph/completion.hpp>
#include <stoke/graph/pipeline.hpp>
#include <stoke/nodes/shapes.hpp>
#include <stoke/train/input.hpp>
#include <thread>
#include <utility>

#include "opencv_threads.hpp"
#include "stoke/bench/timing.hpp"

namespace stoke::bench {
namespace {

namespace fs = std::filesystem;

constexpr auto sample_period = std::chrono::milliseconds(100);
constexpr double rate_window_s = 1.0;  // rate(t): images in [t - 1 s, t]
constexpr double tie_share = 0.005;    // static rates this close are the same

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
      const std::lock_guard lock(mutex_);
      closing_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  SimulatedDevice(const SimulatedDevice&) = delete;
  SimulatedDevice& operator=(const SimulatedDevice&) = delete;

  void submit(nodes::Batch batch, graph::Completion<std::size_t> done) {
    {
      const std::lock_guard lock(mutex_);
      queue_.push_back(Job{std::move(batch), std::move(done), Clock::now()});
    }
    cv_.notify_one();
  }

  /// Seconds the device was busy within [from, to].
  double busy_seconds(Clock::time_point from, Clock::time_point to) const {
    const std::lock_guard lock(mutex_);
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

struct Run {
  graph::RunReport report;
  std::vector<RateSample> samples;  // {0, 0}, then every 100 ms, the last at the stop
  Clock::time_point start;
};

// The first sample at or after `t` (the last one when none is).
std::size_t sample_at(const std::vector<RateSample>& samples, double t) {
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].t >= t - 1e-3) return i;
  }
  return samples.size() - 1;
}

Window window(const Run& run, const SimulatedDevice& device, double from_s) {
  const RateSample& a = run.samples[sample_at(run.samples, from_s)];
  const RateSample& b = run.samples.back();
  Window w{a.t, b.t, 0, 0, {}};
  if (b.t <= a.t) return w;
  w.second_rates = rates_per_second(run.samples, from_s);
  w.rate = w.second_rates.size() >= 3 ? median(w.second_rates) : static_cast<double>(b.images - a.images) / (b.t - a.t);
  const auto at = [&](double t) {
    return run.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t));
  };
  // Both from the same time points: the device's spans do not overlap and are clipped to the
  // window, so the share cannot round above 1 (b.t - a.t as a double could differ by a tick).
  const auto from = at(a.t), to = at(b.t);
  w.busy = to > from ? device.busy_seconds(from, to) / std::chrono::duration<double>(to - from).count() : 0;
  return w;
}

// Runs of the same setting as one: the median of all their seconds; the busy share weighted by
// each window's length. (`from` and `to` stay 0: the windows are not one stretch of time.)
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

// The input pipeline's config for a static setting (no scheduler).
train::InputConfig fixed(const train::InputConfig& base, const StaticSetting& s) {
  train::InputConfig config = base;
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

// One run of the whole pipeline: input -> compute (the simulated device) -> count, judged from
// `measure_from_s` on.
Measured measure(const train::InputConfig& config, const nodes::DatasetPtr& dataset, std::chrono::nanoseconds per_batch,
                 double seconds, double measure_from_s) {
  train::Input input = train::make_input(dataset, config);
  SimulatedDevice device(per_batch);
  std::atomic<std::uint64_t> images{0};
  graph::Pipeline pipe(input.pipeline_options);  // destroyed first: its stages refer to the above
  // Two operations outstanding, fixed: the next batch is queued on the device when one ends.
  const graph::StageOptions compute{.concurrency = graph::Concurrency{2, 2, 2}, .capacity = 2};
  train::add_input(pipe, input, config)
      .async<std::size_t>(
          "compute",
          [&device](nodes::Batch batch, graph::Completion<std::size_t> done) {
            device.submit(std::move(batch), std::move(done));
          },
          compute)
      .sink("count", [&images](std::size_t n) { images.fetch_add(n, std::memory_order_relaxed); });
  Measured m;
  m.run.samples.push_back({0, 0});
  TimedRun timed = run_timed(pipe, seconds, sample_period, [&](double t) {
    m.run.samples.push_back({t, images.load()});
  });
  m.run.report = std::move(timed.report);
  m.run.start = timed.start;
  m.converged = window(m.run, device, measure_from_s);
  return m;
}

void check(const AutotuneBenchOptions& o) {
  if (!std::isfinite(o.compute_ms) || o.compute_ms <= 0) throw std::invalid_argument("compute_ms must be positive");
  if (!std::isfinite(o.seconds) || o.seconds <= 0 || !std::isfinite(o.sweep_seconds) || o.sweep_seconds <= 0)
    throw std::invalid_argument("seconds and sweep_seconds must be positive");
  if (o.batch == 0 || o.size <= 0 || o.repeats < 1 || o.max_concurrency < 0 || o.interval.count() <= 0)
    throw std::invalid_argument("batch, size, repeats and interval must be positive, max_concurrency >= 0");
  if (o.sweep_depths.empty() || std::find(o.sweep_depths.begin(), o.sweep_depths.end(), 0) != o.sweep_depths.end())
    throw std::invalid_argument("sweep_depths must be positive numbers of batches");
}

// Everything the runs share.
struct Bench {
  const nodes::DatasetPtr& dataset;
  const AutotuneBenchOptions& options;
  const AutotuneBenchCallbacks& callbacks;
  train::InputConfig base;
  std::chrono::nanoseconds per_batch;
  double warmup;

  Measured run(const train::InputConfig& config, double seconds, double from) const {
    return measure(config, dataset, per_batch, seconds, from);
  }
};

// (b): decode concurrency 1..most (read 1, or 2 beyond the cores) x the depths, each for
// sweep_seconds; the fastest is kept, near-ties going to the setting found first (fewer threads,
// less memory).
void sweep(const Bench& bench, AutotuneBenchResult& r) {
  for (int decode = 1; decode <= r.max_concurrency; ++decode) {
    double previous = 0;
    for (const std::size_t depth : bench.options.sweep_depths) {
      const StaticSetting s{decode > r.cores ? 2 : 1, decode, depth};
      const Window w = bench.run(fixed(bench.base, s), bench.options.sweep_seconds, bench.warmup).converged;
      ++r.settings;
      if (bench.callbacks.swept) bench.callbacks.swept(s, w);
      if (r.settings == 1 || w.rate > r.best_in_sweep.rate * (1 + tie_share)) {
        r.best = s;
        r.best_in_sweep = w;
      }
      if (w.rate < previous * 1.02) break;  // a deeper queue stopped helping this decode count
      previous = std::max(previous, w.rate);
    }
  }
}

// (a): the scheduler from the worst start. The best of a dozen short, noisy runs is biased up, and
// a shared machine's speed drifts: the best static setting is run again between the scheduler's
// runs, b a b a b ..., and each (a) is compared with the mean of the two (b) beside it.
void tuned_runs(const Bench& bench, AutotuneBenchResult& r) {
  const AutotuneBenchOptions& o = bench.options;
  train::InputConfig config = bench.base;
  config.autotune = true;
  config.read_concurrency = graph::parallel(1, r.max_concurrency, 1);
  config.decode_concurrency = graph::parallel(1, r.max_concurrency, 1);
  config.in_flight = o.batch;
  config.tuning.target = "compute";
  config.tuning.max_in_flight = 8 * o.batch;
  config.tuning.interval = o.interval;
  int run_number = 0;
  if (bench.callbacks.decision) {
    config.tuning.on_decision = [&](const graph::Decision& d) { bench.callbacks.decision(run_number, d); };
  }
  r.static_seconds = o.seconds / 4 + bench.warmup;
  const auto best_static = [&] {
    return bench.run(fixed(bench.base, r.best), r.static_seconds, bench.warmup).converged;
  };
  r.statics.push_back(best_static());
  for (run_number = 1; run_number <= o.repeats; ++run_number) {
    if (bench.callbacks.run_starts) bench.callbacks.run_starts(run_number);
    Measured tuned = bench.run(config, o.seconds, o.seconds / 2);
    r.statics.push_back(best_static());
    AutotuneTrial t;
    t.tuned = tuned.converged;
    t.by_second = rates_per_second(tuned.run.samples, 0);
    t.best_static = (r.statics[r.statics.size() - 2].rate + r.statics.back().rate) / 2;
    t.ratio = t.best_static > 0 ? t.tuned.rate / t.best_static : std::nan("");
    t.to_95 = seconds_to_reach(tuned.run.samples, target_ratio * t.best_static);
    t.report = std::move(tuned.run.report);
    if (bench.callbacks.run_ends) bench.callbacks.run_ends(run_number, t);
    r.trials.push_back(std::move(t));
  }
}

// The medians over the trials, the median trial and the targets.
void summarize(AutotuneBenchResult& r) {
  r.best_static = pooled(r.statics);
  const auto median_of = [&](auto field) {
    std::vector<double> picked;
    for (const AutotuneTrial& t : r.trials) picked.push_back(field(t));
    return median(std::move(picked));
  };
  // Never reached counts as the slowest.
  const double to_95 = median_of([](const AutotuneTrial& t) { return std::isfinite(t.to_95) ? t.to_95 : HUGE_VAL; });
  r.to_95 = std::isfinite(to_95) ? to_95 : std::nan("");
  r.ratio = median_of([](const AutotuneTrial& t) { return t.ratio; });
  r.busy = median_of([](const AutotuneTrial& t) { return t.tuned.busy; });
  r.images_per_sec = median_of([](const AutotuneTrial& t) { return t.tuned.rate; });
  const auto closest = std::min_element(r.trials.begin(), r.trials.end(), [&](const auto& x, const auto& y) {
    return std::abs(x.ratio - r.ratio) < std::abs(y.ratio - r.ratio);
  });
  r.median_trial = static_cast<std::size_t>(closest - r.trials.begin());
  r.targets.ratio = r.ratio >= target_ratio;
  r.targets.fast = std::isfinite(r.to_95) && r.to_95 <= target_seconds;
  r.targets.compute_bound = r.best_static.busy >= bottleneck_busy;
  r.targets.busy = !r.targets.compute_bound || r.busy >= target_busy;
}

}  // namespace

std::string describe(const StaticSetting& s) {
  return "decode " + std::to_string(s.decode) + ", read " + std::to_string(s.read) + ", in-flight " +
         std::to_string(s.depth) + " batch" + (s.depth == 1 ? "" : "es");
}

std::vector<double> rates_per_second(const std::vector<RateSample>& samples, double from_s) {
  std::vector<double> rates;
  if (samples.empty()) return rates;
  const double end = samples.back().t;
  for (double t = samples[sample_at(samples, from_s)].t; t + rate_window_s <= end + 1e-3; t += rate_window_s) {
    const RateSample& x = samples[sample_at(samples, t)];
    const RateSample& y = samples[sample_at(samples, t + rate_window_s)];
    if (y.t > x.t) rates.push_back(static_cast<double>(y.images - x.images) / (y.t - x.t));
  }
  return rates;
}

double seconds_to_reach(const std::vector<RateSample>& samples, double rate) {
  for (const RateSample& b : samples) {
    if (b.t < rate_window_s - 1e-3) continue;
    const RateSample& a = samples[sample_at(samples, b.t - rate_window_s)];
    if (b.t > a.t && static_cast<double>(b.images - a.images) / (b.t - a.t) >= rate) return b.t;
  }
  return std::nan("");
}

AutotuneBenchResult measure_autotune(const nodes::DatasetPtr& dataset, const AutotuneBenchOptions& options,
                                     const AutotuneBenchCallbacks& callbacks) {
  check(options);
  if (!dataset || dataset->size() == 0) throw std::invalid_argument("measure_autotune: the dataset is empty");
  const OpenCvThreads one_per_call(1);
  AutotuneBenchResult r{.options = options, .images = dataset->size()};
  r.cores = graph::usable_cores();
  r.max_concurrency = options.max_concurrency > 0 ? options.max_concurrency : 2 * r.cores;

  Bench bench{dataset, options, callbacks, {}, {}, std::min(0.5, options.sweep_seconds / 4)};
  bench.base.batch_size = options.batch;
  bench.base.size = options.size;
  bench.base.epochs = 0;  // repeat until stopped
  bench.base.seed = options.seed;
  // 8 pool slots: more batches than can be out at once (compute's queue of 2, 2 on the device, one
  // being filled), so the batch stage never waits for a slot.
  bench.base.prefetch = 6;
  bench.per_batch = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double, std::milli>(options.compute_ms));

  sweep(bench, r);
  tuned_runs(bench, r);
  summarize(r);
  return r;
}

void to_json(nlohmann::ordered_json& json, const AutotuneBenchResult& r) {
  const AutotuneBenchOptions& o = r.options;
  nlohmann::ordered_json runs = nlohmann::ordered_json::array(), final_setting = nlohmann::ordered_json::object();
  for (const AutotuneTrial& t : r.trials) {
    runs.push_back({{"ratio_to_best_static", t.ratio},
                    {"seconds_to_95pct", t.to_95},
                    {"compute_busy", t.tuned.busy},
                    {"images_per_sec", t.tuned.rate},
                    {"best_static_images_per_sec", t.best_static},
                    {"images_per_sec_by_second", t.by_second}});
  }
  const graph::RunReport& report = r.trials[r.median_trial].report;
  for (const auto& s : report.stages) final_setting[s.name] = s.concurrency;
  final_setting["in_flight"] = report.max_in_flight;
  json = {{"bench", "autotune"},
          {"ratio_to_best_static", r.ratio},
          {"seconds_to_95pct", r.to_95},  // null when not reached
          {"compute_busy", r.busy},
          {"autotune_images_per_sec", r.images_per_sec},
          {"repeats", o.repeats},
          {"runs", runs},
          {"best_static_images_per_sec", r.best_static.rate},
          {"best_static_compute_busy", r.best_static.busy},
          {"best_static_sweep_images_per_sec", r.best_in_sweep.rate},
          {"best_static", {{"decode", r.best.decode}, {"read", r.best.read}, {"in_flight", r.best.depth * o.batch}}},
          {"static_settings", r.settings},
          {"compute_ms", o.compute_ms},
          {"batch", o.batch},
          {"size", o.size},
          {"cores", r.cores},
          {"images", r.images},
          {"generated", r.generated},
          {"seconds", o.seconds},
          {"sweep_seconds", o.sweep_seconds},
          {"decisions", report.decisions.size()},
          {"final", final_setting},
          {"compute_bound", r.targets.compute_bound},
          {"targets_met", r.targets.met()}};
}

GeneratedCorpus::GeneratedCorpus(std::size_t images, int side) {
  std::string pattern = (fs::temp_directory_path() / "stoke-bench-autotune-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("cannot create a temporary folder like " + pattern +
                             " for the generated corpus (set TMPDIR to a writable folder, or give a dataset)");
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
    std::error_code ignored;
    fs::remove_all(root_, ignored);
    throw;
  }
}

GeneratedCorpus::~GeneratedCorpus() {
  std::error_code ignored;
  fs::remove_all(root_, ignored);
}

}  // namespace stoke::bench
