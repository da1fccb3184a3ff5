// `stoke evaluate`: the accuracy of a checkpoint of `stoke train` on a labelled dataset, through
// the input pipeline with the checkpoint's evaluation transforms (no shuffling, every image once):
// top-1, top-5, the images seen and skipped, and a confusion matrix -- in full for up to 20
// classes, else the most confused pairs.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <stoke/nn/layer.hpp>
#include <stoke/nn/loss.hpp>
#include <string>
#include <tuple>
#include <vector>

// GCC 12 reports a false null dereference inside Boost.Program_options' typed_value<std::string>.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include "cli.hpp"
#pragma GCC diagnostic pop
#include <stoke/train/builtin.hpp>
#include <stoke/train/compute.hpp>
#include <stoke/train/epoch.hpp>
#include <stoke/train/input.hpp>
#include <stoke/train/metrics.hpp>
#include <stoke/train/model_card.hpp>

#include "commands.hpp"
#include "json.hpp"

namespace stoke::app {

using namespace stoke::train;  // NOLINT(google-build-using-namespace): the commands are glue over it
namespace {

namespace po = boost::program_options;

struct EvaluateConfig {
  std::string checkpoint;
  std::string data;
  int batch = 64;
  std::string device = "auto";
  int threads = 0;
  bool json = false;
};

// Beyond this many classes the full matrix is unreadable: the most confused pairs are printed.
constexpr std::size_t max_matrix_classes = 20;
constexpr std::size_t listed_pairs = 20;
constexpr std::size_t listed_skips = 20;

using Matrix = std::vector<std::vector<std::uint64_t>>;

std::string quoted_list(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + ("'" + item + "'");
  return "[" + out + "]";
}

// A list file's classes are its labels as numbers ("0", "1", ...), which index the checkpoint's.
bool numbered_labels(const std::vector<std::string>& classes) {
  for (std::size_t i = 0; i < classes.size(); ++i) {
    if (classes[i] != std::to_string(i)) return false;
  }
  return true;
}

// The dataset's labels must mean what the checkpoint's do: the same class names in the same
// order (ImageFolder sorts its class folders by name, as `stoke train` saw them).
void check_classes(const nodes::Dataset& dataset, const std::string& data, const ModelCard& card,
                   const std::string& checkpoint) {
  const std::vector<std::string>& mine = dataset.classes();
  if (mine == card.classes) return;
  if (!mine.empty() && numbered_labels(mine) && mine.size() <= card.classes.size()) return;
  std::string difference;
  if (mine.size() <= 10 && card.classes.size() <= 10) {
    difference = quoted_list(mine) + " here, " + quoted_list(card.classes) + " in the checkpoint";
  } else {
    std::size_t i = 0;
    while (i < mine.size() && i < card.classes.size() && mine[i] == card.classes[i]) ++i;
    difference = std::to_string(mine.size()) + " here, " + std::to_string(card.classes.size()) +
                 " in the checkpoint; the first difference is class " + std::to_string(i) + ": " +
                 (i < mine.size() ? "'" + mine[i] + "'" : "none") + " here, " +
                 (i < card.classes.size() ? "'" + card.classes[i] + "'" : "none") + " in the checkpoint";
  }
  throw std::runtime_error(data + ": its classes differ from those of " + checkpoint + " (" + difference +
                           "); evaluate needs the classes the model was trained on, in the same order");
}

std::string fit(const std::string& name, std::size_t width) {
  return name.size() <= width ? name : name.substr(0, width - 1) + "~";
}

void print_matrix(const Matrix& confusion, const std::vector<std::string>& classes) {
  constexpr std::size_t max_name = 12;
  std::size_t row_width = 0;
  std::uint64_t largest = 0;
  for (std::size_t i = 0; i < classes.size(); ++i) {
    row_width = std::max(row_width, fit(classes[i], max_name).size());
    for (const std::uint64_t n : confusion[i]) largest = std::max(largest, n);
  }
  std::vector<int> widths;
  std::string header(row_width, ' ');
  for (const std::string& name : classes) {
    widths.push_back(static_cast<int>(std::max(fit(name, max_name).size(), std::to_string(largest).size())));
    char cell[64];
    std::snprintf(cell, sizeof cell, "  %*s", widths.back(), fit(name, max_name).c_str());
    header += cell;
  }
  std::printf("confusion matrix (rows: true class, columns: predicted)\n%s\n", header.c_str());
  for (std::size_t i = 0; i < classes.size(); ++i) {
    std::string line = fit(classes[i], max_name);
    line.resize(row_width, ' ');
    for (std::size_t j = 0; j < classes.size(); ++j) {
      char cell[64];
      std::snprintf(cell, sizeof cell, "  %*llu", widths[j], static_cast<unsigned long long>(confusion[i][j]));
      line += cell;
    }
    std::printf("%s\n", line.c_str());
  }
}

void print_confused_pairs(const Matrix& confusion, const std::vector<std::string>& classes) {
  std::vector<std::tuple<std::uint64_t, std::size_t, std::size_t>> pairs;  // count, true, predicted
  for (std::size_t i = 0; i < classes.size(); ++i) {
    for (std::size_t j = 0; j < classes.size(); ++j) {
      if (i != j && confusion[i][j] > 0) pairs.emplace_back(confusion[i][j], i, j);
    }
  }
  // Most images first; ties in class order.
  std::sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) {
    if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);
    return std::tie(std::get<1>(a), std::get<2>(a)) < std::tie(std::get<1>(b), std::get<2>(b));
  });
  if (pairs.empty()) {
    std::printf("no image was confused with another class\n");
    return;
  }
  std::printf("most confused classes (true -> predicted: images, share of the true class), of %zu pairs:\n",
              pairs.size());
  for (std::size_t k = 0; k < std::min(pairs.size(), listed_pairs); ++k) {
    const auto [count, truth, predicted] = pairs[k];
    std::uint64_t row_total = 0;
    for (const std::uint64_t n : confusion[truth]) row_total += n;
    std::printf("  %s -> %s: %llu (%.1f%%)\n", classes[truth].c_str(), classes[predicted].c_str(),
                static_cast<unsigned long long>(count),
                100.0 * static_cast<double>(count) / static_cast<double>(row_total));
  }
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
      "threads", po::value(&c.threads)->default_value(c.threads), "input threads (0: the scheduler's choice)")(
      "json", po::bool_switch(&c.json),
      "one JSON object: top1, top5, images, skipped, skipped_files, loss, classes, confusion");
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (c.checkpoint.empty()) return cli.usage_error("--checkpoint is required (a checkpoint written by `stoke train`)");
  if (c.data.empty()) return cli.usage_error("--data is required (the labelled images to evaluate on)");
  if (c.batch < 1 || c.threads < 0) return cli.usage_error("--batch must be at least 1 and --threads at least 0");

  ComputeContext compute = make_compute(c.device, c.json ? nullptr : &std::cerr);
  nn::Backend& backend = *compute.backend;
  const InferenceModel loaded = load_for_inference(c.checkpoint, backend);
  const ModelCard& card = loaded.card;
  const nodes::DatasetPtr dataset = open_dataset(c.data);
  if (dataset->size() == 0) throw std::runtime_error(c.data + ": no images to evaluate");
  check_classes(*dataset, c.data, card, c.checkpoint);
  if (!c.json) {
    std::fprintf(stderr, "stoke evaluate: %s (%zu classes) on %s; %zu images, %dx%d, batch %d\n", card.model.c_str(),
                 card.classes.size(), backend.describe().c_str(), dataset->size(), card.image_size, card.image_size,
                 c.batch);
  }

  InputConfig config;
  config.batch_size = static_cast<std::size_t>(c.batch);
  config.size = card.image_size;
  config.transforms = card.eval_transforms;
  config.threads = c.threads;
  config.tuning.target = "evaluate";
  config.shuffle = false;
  config.drop_last = false;

  const std::size_t classes = card.classes.size();
  Matrix confusion(classes, std::vector<std::uint64_t>(classes, 0));
  nn::Context ctx{.backend = backend, .mode = nn::Mode::eval};
  const nn::SoftmaxCrossEntropy loss;
  const auto step = [&](const BatchTensors& t) {
    const nn::Tensor logits = loaded.model->forward(t.images, ctx);
    StepResult r{loss.forward(logits, t.labels, ctx)};
    const HostScores host = to_host(logits, t.labels, backend);
    r.correct_top5 = 0;
    for (std::size_t i = 0; i < host.labels.size(); ++i) {
      const std::int32_t label = host.labels[i];
      if (label < 0 || static_cast<std::size_t>(label) >= classes) {
        throw std::runtime_error(c.data + ": an image has the label " + std::to_string(label) + ", outside the " +
                                 std::to_string(classes) + " classes of the checkpoint");
      }
      const std::span<const float> row = host.row(i);
      const auto predicted = static_cast<std::size_t>(std::max_element(row.begin(), row.end()) - row.begin());
      ++confusion[static_cast<std::size_t>(label)][predicted];
      if (in_top_k(row, label, 5)) ++r.correct_top5;
    }
    return r;
  };
  const auto progress = [&](const EpochTotals& t, const graph::Pipeline&) {
    if (!c.json) std::fprintf(stderr, "\r  %lld / %zu images ", static_cast<long long>(t.images), dataset->size());
  };
  const EpochTotals totals = run_epoch(dataset, config, "evaluate", backend, step, progress);
  if (!c.json) std::fprintf(stderr, "\r%40s\r", "");

  if (totals.images == 0) {
    throw std::runtime_error(
        c.data + ": none of its " + std::to_string(dataset->size()) + " images could be read and decoded" +
        (totals.skipped_files.empty()
             ? ""
             : " (the first, " + totals.skipped_files[0].file + ": " + totals.skipped_files[0].reason + ")"));
  }
  std::uint64_t diagonal = 0;
  for (std::size_t i = 0; i < classes; ++i) diagonal += confusion[i][i];
  const auto images = static_cast<double>(totals.images);
  const double top1 = static_cast<double>(diagonal) / images;
  const double top5 = static_cast<double>(totals.correct_top5) / images;
  const double mean_loss = totals.loss_sum / images;

  if (c.json) {
    Json j;
    j.field("checkpoint", c.checkpoint);
    j.field("model", card.model);
    j.field("top1", top1);
    j.field("top5", top5);
    j.field("loss", mean_loss);
    j.field("images", static_cast<std::uint64_t>(totals.images));
    j.field("skipped", static_cast<std::uint64_t>(totals.skipped));
    j.begin_array("skipped_files");
    for (const SkippedFile& skip : totals.skipped_files) j.value(skip.file);
    j.end_array();
    j.begin_array("classes");
    for (const std::string& name : card.classes) j.value(name);
    j.end_array();
    j.begin_array("confusion");
    for (const std::vector<std::uint64_t>& row : confusion) {
      j.begin_array();
      for (const std::uint64_t n : row) j.value(n);
      j.end_array();
    }
    j.end_array();
    std::printf("%s\n", j.str().c_str());
  } else {
    std::printf("top-1 %.4f, top-5 %.4f, loss %.4f: %lld images, %llu skipped\n", top1, top5, mean_loss,
                static_cast<long long>(totals.images), static_cast<unsigned long long>(totals.skipped));
    for (std::size_t i = 0; i < std::min(totals.skipped_files.size(), listed_skips); ++i) {
      std::printf("  skipped %s: %s\n", totals.skipped_files[i].file.c_str(), totals.skipped_files[i].reason.c_str());
    }
    if (totals.skipped > listed_skips) {
      std::printf("  ... and %llu more\n", static_cast<unsigned long long>(totals.skipped - listed_skips));
    }
    if (classes <= max_matrix_classes) {
      print_matrix(confusion, card.classes);
    } else {
      print_confused_pairs(confusion, card.classes);
    }
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace stoke::app
