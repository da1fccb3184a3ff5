// `stoke bench autotune`: does the scheduler find a good setting by itself? The input pipeline
// feeds a simulated accelerator; a sweep of static settings finds the best one, then runs with the
// scheduler from the worst start are compared with it (bench::measure_autotune). This file parses
// the options and prints.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <stoke/bench/autotune.hpp>
#include <stoke/graph/autotune.hpp>
#include <stoke/train/input.hpp>
#include <string>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "status_line.hpp"

namespace stoke::app {
namespace {

namespace po = boost::program_options;
using bench::AutotuneBenchResult;
using bench::AutotuneTrial;

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

const char* yes_no(bool b) { return b ? "yes" : "NO"; }

// "95% <of> after 3.1 s" or "95% <of> not reached".
void print_to_95(double to_95, const char* of) {
  if (std::isfinite(to_95)) {
    std::printf("95%% %safter %.1f s\n", of, to_95);
  } else {
    std::printf("95%% %snot reached\n", of);
  }
}

void print_autotune_text(const AutotuneBenchResult& r) {
  const bench::AutotuneBenchOptions& o = r.options;
  std::printf("bench autotune: %zu images%s, batch %zu, %dx%d, compute %.1f ms/batch, %d cores\n", r.images,
              r.generated ? " (generated)" : "", o.batch, o.size, o.size, o.compute_ms, r.cores);
  std::printf("  (b) best static of %d settings: %s (%zu items)\n", r.settings, bench::describe(r.best).c_str(),
              r.best.depth * o.batch);
  std::printf(
      "      %.1f images/s (median second of %zu runs of %.1f s around (a)'s), compute busy %.1f%% "
      "(in the sweep: %.1f)\n",
      r.best_static.rate, r.statics.size(), r.static_seconds, 100 * r.best_static.busy, r.best_in_sweep.rate);
  std::printf("  (a) scheduler from %s, %d runs of %.1f s, each judged on its second half:\n",
              bench::describe({1, 1, 1}).c_str(), o.repeats, o.seconds);
  for (std::size_t i = 0; i < r.trials.size(); ++i) {
    const AutotuneTrial& t = r.trials[i];
    std::printf("      run %zu: %.1f images/s = %.3f x best static beside it (%.1f), compute busy %.1f%%, ", i + 1,
                t.tuned.rate, t.ratio, t.best_static, 100 * t.tuned.busy);
    print_to_95(t.to_95, "");
  }
  std::printf("      median: %.3f x best static, compute busy %.1f%%, ", r.ratio, 100 * r.busy);
  print_to_95(r.to_95, "of best static ");
  const graph::RunReport& report = r.trials[r.median_trial].report;
  std::printf("      final setting of the median run:");
  for (const auto& s : report.stages) {
    if (s.kind != graph::StageKind::source && s.kind != graph::StageKind::sink)
      std::printf(" %s %d,", s.name.c_str(), s.concurrency);
  }
  std::printf(" in-flight %zu items (%.1f batches)\n", report.max_in_flight,
              static_cast<double>(report.max_in_flight) / static_cast<double>(o.batch));
  std::printf("  scheduler:");
  if (report.decisions.empty()) {
    std::printf(" no moves\n");
  } else {
    std::printf(" %zu move%s\n", report.decisions.size(), report.decisions.size() == 1 ? "" : "s");
    for (const auto& d : report.decisions) std::printf("    %s\n", decision_line(d).c_str());
  }
  const bench::AutotuneTargets& targets = r.targets;
  std::printf("  targets %s: ratio >= %.2f %s (%.3f); 95%% within %.0f s %s", targets.met() ? "met" : "NOT met",
              bench::target_ratio, yes_no(targets.ratio), r.ratio, bench::target_seconds, yes_no(targets.fast));
  if (std::isfinite(r.to_95)) std::printf(" (%.1f s)", r.to_95);
  if (targets.compute_bound) {
    std::printf("; compute busy >= %.0f%% %s (%.1f%%)\n", 100 * bench::target_busy, yes_no(targets.busy), 100 * r.busy);
  } else {
    std::printf("; compute busy: not judged (the input is the bottleneck: compute busy %.0f%% at the best static)\n",
                100 * r.best_static.busy);
  }
}

constexpr const char* bench_autotune_summary =
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
    "  stoke bench autotune --compute-ms 10 --json";

// What the command line says, once parsed.
struct AutotuneArgs {
  bench::AutotuneBenchOptions o;
  std::string data, depths_text = "1,2,4,8";
  std::size_t corpus_images = 500;
  int interval_ms = static_cast<int>(o.interval.count()), corpus_side = 320;
  bool json = false;
};

void add_options(CommandOptions& cli, AutotuneArgs& a) {
  cli.add()("data", po::value(&a.data),
            "an image folder, a .stoke pack, a path,label list file, or a CIFAR folder (default: a generated corpus)")(
      "corpus-images", po::value(&a.corpus_images)->default_value(a.corpus_images),
      "without --data: images in the generated corpus")(
      "corpus-side", po::value(&a.corpus_side)->default_value(a.corpus_side),
      "without --data: width and height of the generated images, pixels")(
      "batch", po::value(&a.o.batch)->default_value(a.o.batch), "images per batch")(
      "size", po::value(&a.o.size)->default_value(a.o.size), "output side in pixels")(
      "compute-ms", po::value(&a.o.compute_ms)->default_value(a.o.compute_ms),
      "the simulated accelerator's time per batch, milliseconds")(
      "seconds", po::value(&a.o.seconds)->default_value(a.o.seconds), "length of each run with the scheduler")(
      "repeats", po::value(&a.o.repeats)->default_value(a.o.repeats),
      "runs with the scheduler, alternated with runs of the best static setting; medians are reported")(
      "max-concurrency", po::value(&a.o.max_concurrency)->default_value(0),
      "the most concurrent calls of read and decode, in the sweep and for the scheduler (0: 2 x cores)")(
      "sweep-seconds", po::value(&a.o.sweep_seconds)->default_value(a.o.sweep_seconds), "length of each static run")(
      "sweep-depths", po::value(&a.depths_text)->default_value(a.depths_text),
      "in-flight limits of the sweep, in batches, comma-separated (a decode count stops at the first "
      "depth that does not help)")("interval-ms", po::value(&a.interval_ms)->default_value(a.interval_ms),
                                   "the scheduler's interval between two looks at the stats")(
      "seed", po::value(&a.o.seed)->default_value(a.o.seed), "seed of the shuffle and the augmentation")(
      "json", po::bool_switch(&a.json), "print one JSON line instead of the summary");
}

// A usage mistake the parser cannot see, or "" when there is none; completes a.o.
std::string check(AutotuneArgs& a) {
  bench::AutotuneBenchOptions& o = a.o;
  if (!std::isfinite(o.compute_ms) || o.compute_ms <= 0 || o.compute_ms > 60000)
    return "--compute-ms must be a time per batch in (0, 60000] milliseconds";
  if (!std::isfinite(o.seconds) || o.seconds <= 0 || o.seconds > 86400) return "--seconds must be positive";
  if (!std::isfinite(o.sweep_seconds) || o.sweep_seconds <= 0 || o.sweep_seconds > 86400)
    return "--sweep-seconds must be positive";
  if (o.batch == 0 || o.size <= 0) return "--batch and --size must be positive";
  if (a.interval_ms <= 0) return "--interval-ms must be positive";
  if (o.repeats < 1 || o.repeats > 100) return "--repeats must be in 1..100";
  if (o.max_concurrency < 0) return "--max-concurrency must be >= 0";
  if (a.corpus_images == 0 || a.corpus_side < 16 || a.corpus_side > 4096)
    return "--corpus-images must be positive and --corpus-side in 16..4096";
  const auto depths = parse_depths(a.depths_text);
  if (!depths) return "--sweep-depths must be positive integers separated by commas, e.g. 1,2,4,8";
  o.sweep_depths = *depths;
  o.interval = std::chrono::milliseconds(a.interval_ms);
  return "";
}

// The sweep's settings and each run's end on stderr; with the text output, each run's start and
// the scheduler's moves too.
bench::AutotuneBenchCallbacks progress_callbacks(const bench::AutotuneBenchOptions& o, bool json) {
  bench::AutotuneBenchCallbacks callbacks;
  callbacks.swept = [](const bench::StaticSetting& s, const bench::Window& w) {
    std::fprintf(stderr, "bench autotune: static %-40s %8.1f images/s, compute busy %5.1f%%\n",
                 bench::describe(s).c_str(), w.rate, 100 * w.busy);
  };
  callbacks.run_ends = [](int run, const AutotuneTrial& t) {
    std::fprintf(stderr,
                 "bench autotune: run %d: %.1f images/s = %.3f x best static (%.1f, the runs beside it); 95%% after "
                 "%.1f s; compute busy %.1f%%\n",
                 run, t.tuned.rate, t.ratio, t.best_static, t.to_95, 100 * t.tuned.busy);
  };
  if (!json) {
    callbacks.run_starts = [&o](int run) {
      std::fprintf(stderr, "bench autotune: scheduler run %d of %d from %s, for %.1f s\n", run, o.repeats,
                   bench::describe({1, 1, 1}).c_str(), o.seconds);
    };
    callbacks.decision = [](int run, const graph::Decision& d) {
      std::fprintf(stderr, "autotune %d: %s\n", run, decision_line(d).c_str());
    };
  }
  return callbacks;
}

}  // namespace

int bench_autotune(int argc, char** argv) {
  AutotuneArgs a;
  bench::AutotuneBenchOptions& o = a.o;
  CommandOptions cli("bench autotune", bench_autotune_summary, "[options]");
  add_options(cli, a);
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (const std::string mistake = check(a); !mistake.empty()) return cli.usage_error(mistake);
  std::string data = a.data;
  const bool json = a.json;
  const std::size_t corpus_images = a.corpus_images;
  const int corpus_side = a.corpus_side;

  std::optional<bench::GeneratedCorpus> corpus;
  if (data.empty()) {
    const auto begin = std::chrono::steady_clock::now();
    corpus.emplace(corpus_images, corpus_side);
    data = corpus->train().string();
    std::fprintf(stderr, "bench autotune: generated %zu JPEGs (%dx%d shapes) in %s in %.1f s; deleted at the end\n",
                 corpus_images, corpus_side, corpus_side, corpus->root().c_str(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
  }
  const nodes::DatasetPtr dataset = train::open_dataset(data);
  if (dataset->size() == 0) throw std::runtime_error(data + ": the dataset is empty");

  const bench::AutotuneBenchCallbacks callbacks = progress_callbacks(o, json);
  AutotuneBenchResult result = bench::measure_autotune(dataset, o, callbacks);
  result.generated = corpus.has_value();
  if (json) {
    print_json(result);
  } else {
    print_autotune_text(result);
  }
  return 0;
}

}  // namespace stoke::app
