// `stoke bench pipeline`: the input pipeline's throughput on a real dataset (read -> decode + fused
// random resized crop -> flip -> normalize -> batch), by bench::measure_input_pipeline; this file
// parses the options and prints.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stoke/bench/input_pipeline.hpp>
#include <stoke/nodes/cache.hpp>
#include <stoke/nodes/dataset_registry.hpp>
#include <stoke/nodes/registry.hpp>
#include <stoke/train/input.hpp>
#include <string>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "progress.hpp"
#include "status_line.hpp"

namespace stoke::app {

using namespace stoke::train;  // NOLINT(google-build-using-namespace): the commands are glue over it

namespace po = boost::program_options;

namespace {

void print_pipeline_text(const bench::InputPipelineResult& r, std::size_t dataset_size) {
  std::printf("input pipeline: %zu items, batch %zu, %dx%d, %d threads, %s decode\n", dataset_size, r.batch_size,
              r.size, r.size, r.threads, r.fuse ? "fused" : "plain");
  std::printf("  batches of %s\n", r.shape.c_str());
  std::printf("  %llu images in %llu batches in %.2f s: %.1f images/s\n", static_cast<unsigned long long>(r.images),
              static_cast<unsigned long long>(r.batches), r.seconds, r.images_per_sec());
  std::printf("  files read %llu = images %llu + skipped %llu\n", static_cast<unsigned long long>(r.files_read),
              static_cast<unsigned long long>(r.images), static_cast<unsigned long long>(r.skipped_count));
  if (r.left_out.count > 0) {
    std::printf("  left out when the dataset opened: %llu (never read; listed on stderr)\n",
                static_cast<unsigned long long>(r.left_out.count));
  }
  if (r.network) std::printf("  %s\n", network_text(*r.network).c_str());
  std::printf("  stage        busy%%   (limited by %s)\n", r.bottleneck.c_str());
  // Busy share of the stage's concurrency at the end (the scheduler may have moved it).
  for (const auto& s : r.report.stages) {
    std::printf("  %-10s %6.1f  (%d way%s", s.name.c_str(), r.busy_pct(s), s.concurrency,
                s.concurrency == 1 ? "" : "s");
    if (r.autotune && s.min_concurrency != s.max_concurrency) {
      std::printf(", %d..%d", s.min_concurrency, s.max_concurrency);
    }
    std::printf(")\n");
  }
  if (r.autotune) {
    std::printf("  scheduler: in-flight limit %zu at the end", r.report.max_in_flight);
    if (r.report.decisions.empty()) {
      std::printf("; no moves\n");
    } else {
      std::printf("; %zu move%s:\n", r.report.decisions.size(), r.report.decisions.size() == 1 ? "" : "s");
      for (const auto& d : r.report.decisions) std::printf("    %s\n", decision_line(d).c_str());
    }
  }
  if (r.baseline_images_per_sec > 0) {
    std::printf("  plain C++ loop, 1 thread: %.1f images/s; pipeline / (%d x loop) = %.2f\n", r.baseline_images_per_sec,
                r.threads, r.efficiency());
  }
  if (!r.skipped.empty()) {
    std::uint64_t listed = 0;  // one skip per file and epoch
    for (const auto& s : r.skipped) listed += std::max<std::size_t>(1, s.epochs.size());
    std::printf("  skipped %zu file%s:\n", r.skipped.size(), r.skipped.size() == 1 ? "" : "s");
    for (const auto& s : r.skipped) {
      const std::string times = s.epochs.size() > 1 ? " (in " + std::to_string(s.epochs.size()) + " epochs)" : "";
      std::printf("    %s%s: %s\n", s.file.c_str(), times.c_str(), s.reason.c_str());
    }
    if (listed < r.skipped_count) {
      std::printf("    ... and %llu more skips\n", static_cast<unsigned long long>(r.skipped_count - listed));
    }
  }
}

// What the command line says, once parsed.
struct PipelineArgs {
  InputConfig config;
  std::string data, data_format = "auto", color = "rgb", on_error = "skip", autotune = "on", normalize_in = "batch";
  double seconds = 0;
  std::uint32_t epochs = 0;
  std::size_t cache_bytes = 0, baseline_images = 0;
  bool json = false, no_fuse = false, no_shuffle = false;
};

void add_options(CommandOptions& cli, PipelineArgs& a) {
  cli.add()("data", po::value(&a.data)->required(),
            "an image folder (class subfolders; JPEG, PNG, DICOM, ...), a segmentation folder (images/ and masks/), "
            "a .stoke pack, a list file (path,label or with a header of columns: path, label, mask, targets), a "
            "CIFAR folder, or WebDataset tar shards (a .tar, a folder of them, or a pattern such as "
            "'shards/train-{000000..000146}.tar'), or a folder of COCO images (--format \"coco annotations=FILE\")")(
      "format", po::value(&a.data_format)->default_value(a.data_format), format_help().c_str())(
      "color", po::value(&a.color)->default_value(a.color),
      "rgb: decode to 8-bit RGB (what photo models take); keep: what the files hold (grayscale as 1 channel, "
      "16-bit PNG as uint16, DICOM as modality values such as Hounsfield units), batched as they are")(
      "batch", po::value(&a.config.batch_size)->default_value(a.config.batch_size), "images per batch")(
      "size", po::value(&a.config.size)->default_value(a.config.size), "output side in pixels")(
      "threads", po::value(&a.config.threads)->default_value(0),
      "worker threads, and the parallel stages' concurrency (0: one per core; with --autotune, the scheduler may "
      "go up to 2 per core)")(
      "autotune", po::value(&a.autotune)->default_value(a.autotune),
      "on: the scheduler moves the read and decode stages' concurrency (between 1 and --threads, or 2 x the "
      "cores) and the in-flight limit (up to 16 batches' worth, within a quarter of the free memory) while it "
      "runs, starting from the static settings; off: fixed concurrency and in-flight limit")(
      "seconds", po::value(&a.seconds), "run this long (default: one epoch)")("epochs", po::value(&a.epochs),
                                                                              "run this many epochs (default: 1)")(
      "on-error", po::value(&a.on_error)->default_value(a.on_error),
      "bad files: skip (count and list them, go on) or fail (stop at the first, naming it)")(
      "transform", po::value<std::vector<std::string>>()->composing(),
      "a transform spec, repeatable, in order (default: random_resized_crop size=<size>, "
      "random_horizontal_flip, normalize); `stoke bench pipeline --list-transforms` lists them")(
      "plugin", po::value<std::vector<std::string>>()->composing(),
      "a shared library of extra transforms or data formats (see examples/plugin), repeatable")(
      "list-transforms", "print the transforms and their parameters, then exit")(
      "list-formats", "print the data formats and their parameters, then exit")(
      "no-fuse", po::bool_switch(&a.no_fuse), "decode whole images, then crop (default: crop while decoding)")(
      "normalize-in", po::value(&a.normalize_in)->default_value(a.normalize_in),
      "where a final normalize of 8-bit images runs: batch (the batch stage normalizes each image as it writes it "
      "into the batch: one pass) or decode (the decode threads write float images, which the batch stage copies); "
      "the same batches either way")(
      "in-flight", po::value(&a.config.in_flight)->default_value(0), "items in flight (0: two batches' worth)")(
      "prefetch", po::value(&a.config.prefetch)->default_value(a.config.prefetch), "batches queued for the consumer")(
      "cache-bytes", po::value(&a.cache_bytes)->default_value(0), "keep up to this many encoded bytes in memory")(
      "seed", po::value(&a.config.seed)->default_value(0), "seed of the shuffle and the augmentation")(
      "no-shuffle", po::bool_switch(&a.no_shuffle), "visit items in dataset order")(
      "baseline", po::value(&a.baseline_images)->implicit_value(200)->default_value(0),
      "first time N images in a plain one-thread loop (default N: 200)")("json", po::bool_switch(&a.json),
                                                                         "print one JSON line instead of the table");
}

// --list-transforms and --list-formats need no --data: answered before `required` is enforced
// (after the --plugin libraries are loaded). nullopt when neither was asked for.
std::optional<int> list_early(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--list-transforms" || arg == "--list-formats") {
      for (int k = 1; k + 1 < argc; ++k) {
        if (std::string_view(argv[k]) == "--plugin") load_plugin(argv[k + 1]);
      }
      std::cout << (arg == "--list-formats" ? nodes::DatasetRegistry::builtin().help()
                                            : nodes::Registry::builtin().help());
      return 0;
    }
  }
  return std::nullopt;
}

// A usage mistake the parser cannot see, or "" when there is none; completes a.config from the
// options given as words. The --plugin libraries are loaded first: --transform and --format may
// name what they add.
std::string check(PipelineArgs& a, const po::variables_map& values) {
  // Read back rather than bound with po::value(&vector): GCC 12 sees a null dereference in
  // boost's notify() for vector targets (a false positive that -Werror turns fatal).
  if (values.count("transform")) a.config.transforms = values["transform"].as<std::vector<std::string>>();
  if (values.count("plugin")) {
    for (const auto& p : values["plugin"].as<std::vector<std::string>>()) load_plugin(p);
  }
  if (values.count("seconds") && values.count("epochs")) return "give --seconds or --epochs, not both";
  if (values.count("seconds") && !(a.seconds > 0)) return "--seconds must be positive";
  for (std::string mistake :
       {choice_error("on-error", a.on_error, {"skip", "fail"}), choice_error("autotune", a.autotune, {"on", "off"}),
        format_error(a.data_format), choice_error("color", a.color, {"rgb", "keep"}),
        choice_error("normalize-in", a.normalize_in, {"batch", "decode"})}) {
    if (!mistake.empty()) return mistake;
  }
  InputConfig& config = a.config;
  if (config.batch_size == 0 || config.size <= 0 || config.threads < 0 || config.prefetch == 0)
    return "--batch, --size and --prefetch must be positive, --threads >= 0";
  config.on_error = a.on_error == "skip" ? graph::OnError::skip : graph::OnError::fail;
  config.fuse = !a.no_fuse;
  config.normalize_in_batch = a.normalize_in == "batch";
  config.shuffle = !a.no_shuffle;
  config.epochs = a.epochs > 0 ? a.epochs : 1;
  config.autotune = a.autotune == "on";
  config.decode = default_decode_options(a.color == "keep" ? nodes::DecodeColor::keep : nodes::DecodeColor::rgb);
  return "";
}

// The measurement, with a progress line (and the scheduler's moves) on a terminal, then the result.
int run(PipelineArgs& a) {
  InputConfig& config = a.config;
  nodes::DatasetPtr dataset = open_dataset(a.data, a.data_format);
  if (dataset->size() == 0) throw std::runtime_error(a.data + ": the dataset is empty");
  if (a.cache_bytes > 0) dataset = std::make_shared<nodes::CachedDataset>(dataset, a.cache_bytes);
  if (!a.json) print_left_out("bench pipeline", a.data, left_out_of(*dataset));

  bench::InputPipelineOptions options{.seconds = a.seconds, .baseline_images = a.baseline_images};
  if (a.baseline_images > 0 && !a.json)
    std::fprintf(stderr, "bench pipeline: timing %zu images in a plain loop...\n", a.baseline_images);
  // Redrawn at each progress call (every 200 ms), on a terminal only: a log gets the result.
  StatusLine line(std::chrono::milliseconds(0), StatusLine::never);
  if (!a.json) {
    options.progress = [&line](std::uint64_t images, double t) {
      line.show([&] {
        return format("bench pipeline: %8llu images  %7.0f images/s  %5.1f s", static_cast<unsigned long long>(images),
                      t > 0 ? images / t : 0.0, t);
      });
    };
    // Called on the scheduler's thread; printed above the progress line.
    if (config.autotune)
      config.tuning.on_decision = [&line](const graph::Decision& d) { line.print("autotune: " + decision_line(d)); };
  }
  bench::InputPipelineResult result = bench::measure_input_pipeline(dataset, config, options);
  line.clear();
  if (a.json) {
    print_json(result);
  } else {
    print_pipeline_text(result, dataset->size());
  }
  return 0;
}

}  // namespace

int bench_pipeline(int argc, char** argv) {
  PipelineArgs a;
  CommandOptions cli(
      "bench pipeline",
      "Measures the CPU input pipeline on a dataset: read -> decode -> augment -> batch, the\n"
      "default augmentation being ImageNet training's (random resized crop, flip, normalize).\n"
      "Prints images/s, each stage's busy time and the files it skipped. With --baseline it\n"
      "first times the same work in a plain one-thread C++ loop and prints how close the\n"
      "pipeline comes to threads x that rate.\n\n"
      "With --autotune on (the default) stoke's scheduler moves the read and decode stages'\n"
      "concurrency and the in-flight limit while it runs, printing each move on stderr and\n"
      "listing them in the report; --autotune off keeps the settings given.\n\n"
      "Beyond 8-bit RGB: --color keep batches what the files hold (1 or 4+ channels, uint16,\n"
      "int16), and masks and targets travel in batches beside the pixels.\n\n"
      "  stoke bench pipeline --data shapes/train --seconds 10\n"
      "  stoke bench pipeline --data scans --color keep --transform \"random_resized_crop size=256\" --size 256\n"
      "  stoke bench pipeline --data photos --epochs 1 --baseline 200 --json",
      "--data PATH [options]");
  add_options(cli, a);
  if (const std::optional<int> listed = list_early(argc, argv)) return *listed;
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (const std::string mistake = check(a, values); !mistake.empty()) return cli.usage_error(mistake);
  return run(a);
}

}  // namespace stoke::app
