// `stoke bench pipeline`: the input pipeline's throughput on a real dataset: read -> decode
// (+ fused random resized crop) -> flip -> normalize -> batch, with per-stage busy time, the
// files it skipped, the scheduler's moves (--autotune), and optionally the rate of the same work
// in a plain single-thread loop.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <opencv2/core/utility.hpp>
#include <sstream>
#include <stoke/graph/pipeline.hpp>
#include <stoke/nodes/cache.hpp>
#include <stoke/nodes/collate.hpp>
#include <stoke/nodes/decode_augment.hpp>
#include <stoke/nodes/plugin.hpp>
#include <stoke/nodes/registry.hpp>
#include <stoke/train/input.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "json.hpp"

namespace stoke::app {

using namespace stoke::train;  // NOLINT(google-build-using-namespace): the commands are glue over it

namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

namespace {

struct Result {
  std::uint64_t images = 0;
  std::uint64_t batches = 0;
  std::uint64_t files_read = 0;
  double seconds = 0;
  std::vector<SkippedFile> skipped;
  std::uint64_t skipped_count = 0;
  graph::RunReport report;
};

// Runs `body` after `seconds` unless cancelled first; joins on destruction.
class Timer {
 public:
  Timer(double seconds, std::function<void()> body)
      : thread_([this, seconds, body = std::move(body)] {
          std::unique_lock lock(mutex_);
          if (!cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) body();
        }) {}
  ~Timer() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

Result run_pipeline(const InputConfig& config, const nodes::DatasetPtr& dataset, double seconds, bool progress) {
  Input input = make_input(dataset, config);
  graph::Pipeline pipe(input.pipeline_options);
  std::atomic<std::uint64_t> images{0}, batches{0};
  add_input(pipe, input, config)
      .sink("consume",
            [&](nodes::Batch batch) {
              images.fetch_add(batch.size(), std::memory_order_relaxed);
              batches.fetch_add(1, std::memory_order_relaxed);
            },
            {.capacity = config.prefetch});

  std::optional<Timer> stop_timer;
  if (seconds > 0) stop_timer.emplace(seconds, [&] { pipe.stop(); });
  std::atomic<bool> running{true};
  std::thread progress_thread;
  const auto start = Clock::now();
  if (progress) {
    progress_thread = std::thread([&] {
      while (running.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        const double t = std::chrono::duration<double>(Clock::now() - start).count();
        const auto n = images.load();
        std::fprintf(stderr, "\rbench pipeline: %8llu images  %7.0f images/s  %5.1f s",
                     static_cast<unsigned long long>(n), t > 0 ? n / t : 0.0, t);
      }
      std::fprintf(stderr, "\r%60s\r", "");
    });
  }
  struct Joiner {
    std::atomic<bool>& running;
    std::thread& thread;
    ~Joiner() {
      running = false;
      if (thread.joinable()) thread.join();
    }
  } joiner{running, progress_thread};

  Result result;
  result.report = pipe.run();
  result.seconds = std::chrono::duration<double>(result.report.elapsed).count();
  result.images = images.load();
  result.batches = batches.load();
  result.files_read = result.report.produced;
  result.skipped_count = result.report.skipped;
  result.skipped = name_skips(result.report, input, config);
  return result;
}

// The same work without the framework: one thread, read -> decode+augment -> copy into a batch
// slot, in a loop. Returns images per second over `count` images (after a few to warm up).
double baseline_rate(const InputConfig& config, const nodes::DatasetPtr& dataset, std::size_t count) {
  Input input = make_input(dataset, config);
  nodes::ReadSample read(input.dataset);
  nodes::DecodeAugment decode(nodes::Decoder(config.decode), nodes::Augment(input.transforms, config.seed),
                              config.fuse);
  auto batch = input.pool.acquire();
  const auto order = input.order.indices(0);
  count = std::min(count, order.size());
  const std::size_t warmup = std::min<std::size_t>(8, count / 4);
  std::size_t done = 0;
  Clock::time_point start;
  for (std::size_t i = 0; i < count; ++i) {
    if (i == warmup) start = Clock::now();
    try {
      nodes::Image image = decode(read(nodes::ItemRef{order[i], 0}));
      nodes::copy_into(batch, i % config.batch_size, image, false);
      if (i >= warmup) ++done;
    } catch (const std::exception&) {
      // bad files cost what they cost in the pipeline too; they are not counted as images
    }
  }
  const double t = std::chrono::duration<double>(Clock::now() - start).count();
  return t > 0 ? done / t : 0.0;
}

void print_json(const InputConfig& config, const Result& r, double baseline, int threads) {
  Json j;
  j.field("bench", "pipeline");
  j.field("images_per_sec", r.seconds > 0 ? r.images / r.seconds : 0.0);
  j.field("images", r.images);
  j.field("skipped", r.skipped_count);
  j.begin_array("skipped_files");
  for (const auto& s : r.skipped) {
    j.begin_object();
    j.field("file", s.file);
    j.field("reason", s.reason);
    j.end_object();
  }
  j.end_array();
  j.field("files_read", r.files_read);
  j.field("batches", r.batches);
  j.field("seconds", r.seconds);
  j.field("threads", threads);
  j.field("batch", static_cast<std::uint64_t>(config.batch_size));
  j.field("size", config.size);
  j.field("fuse", config.fuse);
  j.begin_array("stages");
  for (const auto& s : r.report.stages) {
    j.begin_object();
    j.field("name", s.name);
    j.field("items_out", s.items_out);
    j.field("busy_pct", r.seconds > 0 ? 100.0 * std::chrono::duration<double>(s.busy).count() /
                                            (r.seconds * std::max(1, s.concurrency))
                                      : 0.0);
    j.end_object();
  }
  j.end_array();
  if (baseline > 0) {
    j.field("baseline_images_per_sec", baseline);
    j.field("efficiency", r.images / r.seconds / (threads * baseline));
  }
  j.field("autotune", config.autotune);
  j.field("max_in_flight", static_cast<std::uint64_t>(r.report.max_in_flight));
  j.begin_array("decisions");
  for (const auto& d : r.report.decisions) {
    j.begin_object();
    j.field("at_s", std::chrono::duration<double>(d.at).count());
    j.field("kind", graph::to_string(d.kind));
    j.field("stage", d.stage.empty() ? std::string("in-flight") : d.stage);
    j.field("from", static_cast<std::uint64_t>(d.from));
    j.field("to", static_cast<std::uint64_t>(d.to));
    j.field("why", d.why);
    j.field("revert", d.revert);
    j.end_object();
  }
  j.end_array();
  std::cout << j.str() << '\n';
}

void print_text(const InputConfig& config, const Result& r, double baseline, int threads, std::size_t dataset_size) {
  const double rate = r.seconds > 0 ? r.images / r.seconds : 0.0;
  std::printf("input pipeline: %zu items, batch %zu, %dx%d, %d threads, %s decode\n", dataset_size, config.batch_size,
              config.size, config.size, threads, config.fuse ? "fused" : "plain");
  std::printf("  %llu images in %llu batches in %.2f s: %.1f images/s\n", static_cast<unsigned long long>(r.images),
              static_cast<unsigned long long>(r.batches), r.seconds, rate);
  std::printf("  files read %llu = images %llu + skipped %llu\n", static_cast<unsigned long long>(r.files_read),
              static_cast<unsigned long long>(r.images), static_cast<unsigned long long>(r.skipped_count));
  std::printf("  stage        busy%%\n");
  // Busy share of the stage's concurrency at the end (the scheduler may have moved it).
  for (const auto& s : r.report.stages) {
    const double busy =
        r.seconds > 0 ? 100.0 * std::chrono::duration<double>(s.busy).count() / (r.seconds * std::max(1, s.concurrency))
                      : 0.0;
    std::printf("  %-10s %6.1f  (%d way%s", s.name.c_str(), busy, s.concurrency, s.concurrency == 1 ? "" : "s");
    if (config.autotune && s.min_concurrency != s.max_concurrency) {
      std::printf(", %d..%d", s.min_concurrency, s.max_concurrency);
    }
    std::printf(")\n");
  }
  if (config.autotune) {
    std::printf("  scheduler: in-flight limit %zu at the end", r.report.max_in_flight);
    if (r.report.decisions.empty()) {
      std::printf("; no moves\n");
    } else {
      std::printf("; %zu move%s:\n", r.report.decisions.size(), r.report.decisions.size() == 1 ? "" : "s");
      for (const auto& d : r.report.decisions) {
        std::ostringstream line;
        graph::print(line, d);
        std::printf("    %s\n", line.str().c_str());
      }
    }
  }
  if (baseline > 0) {
    std::printf("  plain C++ loop, 1 thread: %.1f images/s; pipeline / (%d x loop) = %.2f\n", baseline, threads,
                rate / (threads * baseline));
  }
  if (!r.skipped.empty()) {
    std::printf("  skipped %llu file%s:\n", static_cast<unsigned long long>(r.skipped_count),
                r.skipped_count == 1 ? "" : "s");
    for (const auto& s : r.skipped) std::printf("    %s: %s\n", s.file.c_str(), s.reason.c_str());
    if (r.skipped.size() < r.skipped_count) {
      std::printf("    ... and %llu more\n", static_cast<unsigned long long>(r.skipped_count - r.skipped.size()));
    }
  }
}

}  // namespace

int bench_pipeline(int argc, char** argv) {
  InputConfig config;
  std::string data, on_error = "skip", autotune = "on";
  std::vector<std::string> plugins;
  double seconds = 0;
  std::uint32_t epochs = 0;
  std::size_t cache_bytes = 0, baseline_images = 0;
  bool json = false, no_fuse = false, no_shuffle = false;
  CommandOptions cli("bench pipeline",
                     "Measures the CPU input pipeline on a dataset: read -> decode -> augment -> batch, the\n"
                     "default augmentation being ImageNet training's (random resized crop, flip, normalize).\n"
                     "Prints images/s, each stage's busy time and the files it skipped. With --baseline it\n"
                     "first times the same work in a plain one-thread C++ loop and prints how close the\n"
                     "pipeline comes to threads x that rate.\n\n"
                     "With --autotune on (the default) stoke's scheduler moves the read and decode stages'\n"
                     "concurrency and the in-flight limit while it runs, printing each move on stderr and\n"
                     "listing them in the report; --autotune off keeps the settings given.\n\n"
                     "  stoke bench pipeline --data shapes/train --seconds 10\n"
                     "  stoke bench pipeline --data photos --epochs 1 --baseline 200 --json",
                     "--data PATH [options]");
  cli.add()("data", po::value(&data)->required(),
            "an image folder, a .stoke pack, a path,label list file, or a CIFAR folder")(
      "batch", po::value(&config.batch_size)->default_value(config.batch_size), "images per batch")(
      "size", po::value(&config.size)->default_value(config.size), "output side in pixels")(
      "threads", po::value(&config.threads)->default_value(0),
      "worker threads, and the parallel stages' concurrency (0: one per core; with --autotune, the scheduler may "
      "go up to 2 per core)")(
      "autotune", po::value(&autotune)->default_value(autotune),
      "on: the scheduler moves the read and decode stages' concurrency (between 1 and --threads, or 2 x the "
      "cores) and the in-flight limit (up to 16 batches' worth, within a quarter of the free memory) while it "
      "runs, starting from the static settings; off: fixed concurrency and in-flight limit")(
      "seconds", po::value(&seconds), "run this long (default: one epoch)")("epochs", po::value(&epochs),
                                                                            "run this many epochs (default: 1)")(
      "on-error", po::value(&on_error)->default_value(on_error),
      "bad files: skip (count and list them, go on) or fail (stop at the first, naming it)")(
      "transform", po::value<std::vector<std::string>>()->composing(),
      "a transform spec, repeatable, in order (default: random_resized_crop size=<size>, "
      "random_horizontal_flip, normalize); `stoke bench pipeline --list-transforms` lists them")(
      "plugin", po::value<std::vector<std::string>>()->composing(), "a shared library of extra transforms, repeatable")(
      "list-transforms", "print the transforms and their parameters, then exit")(
      "no-fuse", po::bool_switch(&no_fuse), "decode whole images, then crop (default: crop while decoding)")(
      "in-flight", po::value(&config.in_flight)->default_value(0), "items in flight (0: two batches' worth)")(
      "prefetch", po::value(&config.prefetch)->default_value(config.prefetch), "batches queued for the consumer")(
      "cache-bytes", po::value(&cache_bytes)->default_value(0), "keep up to this many encoded bytes in memory")(
      "seed", po::value(&config.seed)->default_value(0), "seed of the shuffle and the augmentation")(
      "no-shuffle", po::bool_switch(&no_shuffle), "visit items in dataset order")(
      "baseline", po::value(&baseline_images)->implicit_value(200)->default_value(0),
      "first time N images in a plain one-thread loop (default N: 200)")("json", po::bool_switch(&json),
                                                                         "print one JSON line instead of the table");
  po::variables_map values;
  // --list-transforms needs no --data: handle it before `required` is enforced.
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--list-transforms") {
      std::vector<std::string> early_plugins;
      for (int k = 1; k + 1 < argc; ++k) {
        if (std::string_view(argv[k]) == "--plugin") early_plugins.emplace_back(argv[k + 1]);
      }
      for (const auto& p : early_plugins) nodes::load_plugin(p, nodes::Registry::builtin());
      std::cout << nodes::Registry::builtin().help();
      return 0;
    }
  }
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  // Read back rather than bound with po::value(&vector): GCC 12 sees a null dereference in
  // boost's notify() for vector targets (a false positive that -Werror turns fatal).
  if (values.count("transform")) config.transforms = values["transform"].as<std::vector<std::string>>();
  if (values.count("plugin")) plugins = values["plugin"].as<std::vector<std::string>>();
  if (values.count("seconds") && values.count("epochs")) return cli.usage_error("give --seconds or --epochs, not both");
  if (values.count("seconds") && !(seconds > 0)) return cli.usage_error("--seconds must be positive");
  if (on_error != "skip" && on_error != "fail") return cli.usage_error("--on-error must be skip or fail");
  if (autotune != "on" && autotune != "off") return cli.usage_error("--autotune must be on or off");
  if (config.batch_size == 0 || config.size <= 0 || config.threads < 0 || config.prefetch == 0)
    return cli.usage_error("--batch, --size and --prefetch must be positive, --threads >= 0");

  config.on_error = on_error == "skip" ? graph::OnError::skip : graph::OnError::fail;
  config.fuse = !no_fuse;
  config.shuffle = !no_shuffle;
  config.epochs = seconds > 0 ? 0 : (epochs > 0 ? epochs : 1);
  config.autotune = autotune == "on";

  for (const auto& p : plugins) nodes::load_plugin(p, nodes::Registry::builtin());
  nodes::DatasetPtr dataset = open_dataset(data);
  if (dataset->size() == 0) throw std::runtime_error(data + ": the dataset is empty");
  if (cache_bytes > 0) dataset = std::make_shared<nodes::CachedDataset>(dataset, cache_bytes);
  if (!json) {
    for (const auto& ignored : dataset->ignored()) {
      std::fprintf(stderr, "bench pipeline: not counted: %s (%s)\n", ignored.path.c_str(), ignored.reason.c_str());
    }
  }

  const int threads =
      config.threads > 0 ? config.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  // The pipeline runs images in parallel; OpenCV splitting one image's resize across threads on top
  // of that only adds overhead, and would make the one-thread baseline use every core.
  cv::setNumThreads(1);
  double baseline = 0;
  if (baseline_images > 0) {
    if (!json) std::fprintf(stderr, "bench pipeline: timing %zu images in a plain loop...\n", baseline_images);
    baseline = baseline_rate(config, dataset, baseline_images);
  }
  const bool progress = !json && ::isatty(STDERR_FILENO);
  if (config.autotune && !json) {
    // Called on the scheduler's thread; the padding overwrites the progress line on a terminal.
    config.tuning.on_decision = [progress](const graph::Decision& decision) {
      std::ostringstream line;
      graph::print(line, decision);
      std::fprintf(stderr, progress ? "\rautotune: %-60s\n" : "autotune: %s\n", line.str().c_str());
    };
  }
  const Result result = run_pipeline(config, dataset, seconds, progress);
  if (json) {
    print_json(config, result, baseline, threads);
  } else {
    print_text(config, result, baseline, threads, dataset->size());
  }
  return 0;
}

}  // namespace stoke::app
