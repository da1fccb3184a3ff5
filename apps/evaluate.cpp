// `stoke evaluate`: the accuracy of a checkpoint of `stoke train` on a labelled dataset with
// train::evaluate (every image once, the checkpoint's evaluation transforms): top-1, top-5, the
// images seen and skipped, and a confusion matrix -- in full for up to 20 classes, else the most
// confused pairs. This file parses the options and prints.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <stoke/train/compute.hpp>
#include <stoke/train/evaluate.hpp>
#include <stoke/train/input.hpp>
#include <stoke/train/json.hpp>
#include <string>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "progress.hpp"

namespace stoke::app {

using namespace stoke::train;  // NOLINT(google-build-using-namespace): the commands are glue over it
namespace {

namespace po = boost::program_options;

struct EvaluateConfig {
  std::string checkpoint;
  std::string data;
  int batch = 64;
  std::string device = "auto";
  std::string channels_last = "auto";
  int threads = 0;
  bool json = false;
};

// Beyond this many classes the full matrix is unreadable: the most confused pairs are printed.
constexpr std::size_t max_matrix_classes = 20;
constexpr std::size_t listed_pairs = 20;
constexpr std::size_t listed_skips = 20;

// `name`, cut to `width` characters with a '~' at the cut.
std::string clip(const std::string& name, std::size_t width) {
  return name.size() <= width ? name : name.substr(0, width - 1) + "~";
}

void print_matrix(const ConfusionMatrix& confusion, const std::vector<std::string>& classes) {
  constexpr std::size_t max_name = 12;
  std::size_t row_width = 0;
  std::uint64_t largest = 0;
  for (std::size_t i = 0; i < classes.size(); ++i) {
    row_width = std::max(row_width, clip(classes[i], max_name).size());
    for (const std::uint64_t n : confusion.rows()[i]) largest = std::max(largest, n);
  }
  std::vector<int> widths;
  std::string header(row_width, ' ');
  for (const std::string& name : classes) {
    widths.push_back(static_cast<int>(std::max(clip(name, max_name).size(), std::to_string(largest).size())));
    char cell[64];
    std::snprintf(cell, sizeof cell, "  %*s", widths.back(), clip(name, max_name).c_str());
    header += cell;
  }
  std::printf("confusion matrix (rows: true class, columns: predicted)\n%s\n", header.c_str());
  for (std::size_t i = 0; i < classes.size(); ++i) {
    std::string line = clip(classes[i], max_name);
    line.resize(row_width, ' ');
    for (std::size_t j = 0; j < classes.size(); ++j) {
      char cell[64];
      std::snprintf(cell, sizeof cell, "  %*llu", widths[j], static_cast<unsigned long long>(confusion.at(i, j)));
      line += cell;
    }
    std::printf("%s\n", line.c_str());
  }
}

void print_confused_pairs(const ConfusionMatrix& confusion, const std::vector<std::string>& classes) {
  const std::vector<ConfusionMatrix::Pair> pairs = confusion.most_confused(listed_pairs);
  if (pairs.empty()) {
    std::printf("no image was confused with another class\n");
    return;
  }
  std::printf("most confused classes (true -> predicted: images, share of the true class), of %zu pairs:\n",
              confusion.pair_count());
  for (const ConfusionMatrix::Pair& p : pairs) {
    std::printf("  %s -> %s: %llu (%.1f%%)\n", classes[p.truth].c_str(), classes[p.predicted].c_str(),
                static_cast<unsigned long long>(p.count), 100.0 * p.share);
  }
}

void print_evaluation_text(const Evaluation& e, const std::vector<std::string>& classes) {
  std::printf("top-1 %.4f, top-5 %.4f, loss %.4f: %lld images, %llu skipped\n", e.top1, e.top5, e.loss,
              static_cast<long long>(e.images), static_cast<unsigned long long>(e.skipped));
  for (std::size_t i = 0; i < std::min(e.skipped_files.size(), listed_skips); ++i) {
    std::printf("  skipped %s: %s\n", e.skipped_files[i].file.c_str(), e.skipped_files[i].reason.c_str());
  }
  if (e.skipped > listed_skips) {
    std::printf("  ... and %llu more\n", static_cast<unsigned long long>(e.skipped - listed_skips));
  }
  if (e.left_out.count > 0) {
    std::printf("  %llu left out when the dataset opened (never read; listed on stderr)\n",
                static_cast<unsigned long long>(e.left_out.count));
  }
  if (classes.size() <= max_matrix_classes) {
    print_matrix(e.confusion, classes);
  } else {
    print_confused_pairs(e.confusion, classes);
  }
  std::fflush(stdout);
}

}  // namespace

int evaluate(int argc, char** argv) {
  EvaluateConfig c;
  CommandOptions cli(
      "evaluate",
      "Measures a checkpoint of `stoke train` on a labelled dataset: every image once, through the\n"
      "input pipeline with the checkpoint's evaluation transforms. Prints top-1 and top-5 accuracy,\n"
      "the images seen and skipped (unreadable files), and a confusion matrix (for more than 20\n"
      "classes, the most confused pairs). The dataset's classes must be the checkpoint's.\n\n"
      "  stoke evaluate --checkpoint build/train/last.safetensors --data ~/.cache/stoke/shapes-10x32-v2/val\n"
      "  stoke evaluate --checkpoint runs/r18/epoch_30.safetensors --data photos/val --batch 128 --json");
  cli.add()("checkpoint", po::value(&c.checkpoint), "a checkpoint written by `stoke train` (.safetensors)")(
      "data", po::value(&c.data), "labelled images: an ImageFolder, a file list, CIFAR batches or a .stoke shard")(
      "batch", po::value(&c.batch)->default_value(c.batch), "images per batch")(
      "device", po::value(&c.device)->default_value(c.device), "auto, cpu, cuda or cuda:N")(
      "channels-last", po::value(&c.channels_last)->default_value(c.channels_last), channels_last_help)(
      "threads", po::value(&c.threads)->default_value(c.threads), "input threads (0: the scheduler's choice)")(
      "json", po::bool_switch(&c.json),
      "one JSON object: top1, top5, images, skipped, skipped_files, left_out, left_out_files, loss, classes, "
      "confusion");
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (c.checkpoint.empty()) return cli.usage_error("--checkpoint is required (a checkpoint written by `stoke train`)");
  if (c.data.empty()) return cli.usage_error("--data is required (the labelled images to evaluate on)");
  if (c.batch < 1 || c.threads < 0) return cli.usage_error("--batch must be at least 1 and --threads at least 0");

  ChannelsLast channels_last{};
  try {
    channels_last = parse_channels_last(c.channels_last);
  } catch (const std::invalid_argument& e) {
    return cli.usage_error(e.what());
  }

  ComputeContext compute = make_compute(c.device, c.json ? nullptr : &std::cerr);
  nn::Backend& backend = *compute.backend;
  const InferenceModel loaded = load_for_inference(c.checkpoint, backend, channels_last);
  const ModelCard& card = loaded.card;
  const nodes::DatasetPtr dataset = open_dataset(c.data);
  if (dataset->size() == 0) throw std::runtime_error(c.data + ": no images to evaluate");
  check_classes(*dataset, c.data, card, c.checkpoint);
  if (!c.json) {
    std::fprintf(stderr, "stoke evaluate: %s (%zu classes) on %s; %zu images, %dx%d, batch %d\n", card.model.c_str(),
                 card.classes.size(), backend.describe().c_str(), dataset->size(), card.image_size, card.image_size,
                 c.batch);
    print_left_out("stoke evaluate", c.data, left_out_of(*dataset));
  }

  ProgressLine progress(!c.json);
  const auto total = static_cast<std::int64_t>(dataset->size());
  const Evaluation result = train::evaluate(loaded, dataset, backend,
                                            {.batch_size = static_cast<std::size_t>(c.batch),
                                             .threads = c.threads,
                                             .progress = [&](const EpochTotals& t, const graph::Pipeline&) {
                                               const double loss =
                                                   t.images > 0 ? t.loss_sum / static_cast<double>(t.images) : 0.0;
                                               progress.show("evaluate", t.images, total, t.seconds, loss, -1, "");
                                             }});
  progress.clear();
  if (result.images == 0) {
    throw std::runtime_error(
        c.data + ": none of its " + std::to_string(dataset->size()) + " images could be read and decoded" +
        (result.skipped_files.empty()
             ? ""
             : " (the first, " + result.skipped_files[0].file + ": " + result.skipped_files[0].reason + ")"));
  }
  if (c.json) {
    nlohmann::ordered_json json = {{"checkpoint", c.checkpoint}};
    json.update(to_json(result, card));
    print_json(json);
  } else {
    print_evaluation_text(result, card.classes);
  }
  return 0;
}

}  // namespace stoke::app
