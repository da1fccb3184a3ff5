// `stoke classify`: the top classes of some images by a checkpoint of `stoke train`. The images go
// through the same input pipeline as validation images (read -> decode + the checkpoint's eval
// transforms -> batch), so they are seen exactly as the model was evaluated on them; an image
// that cannot be read or decoded is reported and skipped, and the others are still classified.
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <optional>
#include <stoke/graph/pipeline.hpp>
#include <stoke/nn/layer.hpp>
#include <stoke/nodes/sample.hpp>
#include <string>
#include <utility>
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

struct ClassifyConfig {
  std::string checkpoint;
  std::vector<std::string> images;
  int top = 5;
  std::string device = "auto";
  bool json = false;
};

// The image files named on the command line, as a dataset without labels: item i is images[i].
class ImageFiles final : public nodes::Dataset {
 public:
  explicit ImageFiles(std::vector<std::string> files) : files_(std::move(files)) {}
  std::size_t size() const noexcept override { return files_.size(); }
  int label(std::size_t) const override { return -1; }
  std::string name(std::size_t i) const override { return files_.at(i); }
  nodes::Sample read(std::size_t i) const override {
    nodes::Sample sample;
    sample.bytes = nodes::Bytes(nodes::read_file(files_.at(i)));
    sample.index = i;
    sample.name = files_[i];
    return sample;
  }

 private:
  std::vector<std::string> files_;
};

// The softmax of each row of `logits` {rows, classes}, computed in double for the exponentials.
std::vector<float> softmax_rows(const std::vector<float>& logits, std::size_t classes) {
  std::vector<float> out(logits.size());
  for (std::size_t r = 0; r + classes <= logits.size(); r += classes) {
    const float* row = logits.data() + r;
    const float top = *std::max_element(row, row + classes);
    double sum = 0;
    for (std::size_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(row[c] - top));
    for (std::size_t c = 0; c < classes; ++c) {
      out[r + c] = static_cast<float>(std::exp(static_cast<double>(row[c] - top)) / sum);
    }
  }
  return out;
}

}  // namespace

int classify(int argc, char** argv) {
  ClassifyConfig c;
  CommandOptions cli("classify",
                     "Prints the most likely classes of each image, with their probabilities, by a checkpoint of\n"
                     "`stoke train` (which carries the model, its class names and its evaluation transforms).\n"
                     "An image that cannot be read or decoded is reported on stderr and the others are still\n"
                     "classified; the exit code is then 1.\n\n"
                     "  stoke classify --checkpoint runs/r18/last.safetensors cat.jpg dog.jpg\n"
                     "  stoke classify --checkpoint build/train/last.safetensors --top 3 --json shapes/val/*/*.jpg",
                     "--checkpoint FILE [options] IMAGE...");
  cli.add()("checkpoint", po::value(&c.checkpoint), "a checkpoint written by `stoke train` (.safetensors)")(
      "top", po::value(&c.top)->default_value(c.top), "classes to print per image (at most the model's classes)")(
      "device", po::value(&c.device)->default_value(c.device), "auto, cpu, cuda or cuda:N")(
      "json", po::bool_switch(&c.json),
      "one JSON object per image: {\"file\", \"top\": [{\"class\", \"probability\"}]}")(
      "image", po::value(&c.images)->composing(), "an image file (positional, repeatable)");
  cli.positional("image", -1);
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (c.checkpoint.empty()) return cli.usage_error("--checkpoint is required (a checkpoint written by `stoke train`)");
  if (c.images.empty()) return cli.usage_error("no images given: name one or more image files after the options");
  if (c.top < 1) return cli.usage_error("--top must be at least 1 (got " + std::to_string(c.top) + ")");

  ComputeContext compute = make_compute(c.device, c.json ? nullptr : &std::cerr);
  nn::Backend& backend = *compute.backend;
  const InferenceModel loaded = load_for_inference(c.checkpoint, backend);
  const ModelCard& card = loaded.card;
  const std::size_t classes = card.classes.size();
  const auto top = std::min(static_cast<std::size_t>(c.top), classes);

  InputConfig config;
  config.batch_size = std::min<std::size_t>(64, c.images.size());
  config.size = card.image_size;
  config.transforms = card.eval_transforms;
  config.shuffle = false;
  config.autotune = false;
  config.on_error = graph::OnError::skip;
  const auto files = std::make_shared<const ImageFiles>(c.images);
  Input input = make_input(files, config);
  graph::Pipeline pipe(input.pipeline_options);
  nn::Context ctx{.backend = backend, .mode = nn::Mode::eval};
  // By item: the probabilities of every class, in the order of the command line in the end.
  std::vector<std::optional<std::vector<float>>> results(c.images.size());
  add_input(pipe, input, config).sink("classify", [&](nodes::Batch batch) {
    const BatchTensors t = to_tensors(batch, backend);
    // Isolated, as run_epoch's step: the backend's parallel loops must not run input tasks.
    std::vector<float> probabilities;
    tbb::this_task_arena::isolate([&] {
      const nn::Tensor logits = loaded.model->forward(t.images, ctx);
      probabilities = softmax_rows(logits.to_vector(backend.stream()), classes);
    });
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const auto row = probabilities.begin() + static_cast<std::ptrdiff_t>(i * classes);
      results.at(batch.indices()[i]) = std::vector<float>(row, row + static_cast<std::ptrdiff_t>(classes));
    }
  });
  const graph::RunReport report = pipe.run();

  // Why each image failed; the pipeline's positions are the items' indices (no shuffling).
  std::vector<std::string> reasons(c.images.size());
  const std::vector<SkippedFile> skips = name_skips(report, input, config);
  for (std::size_t k = 0; k < skips.size(); ++k) {
    const std::uint64_t i = report.skipped_items[k].index;
    if (i < reasons.size()) reasons[i] = skips[k].reason;
  }
  int failed = 0;
  for (std::size_t i = 0; i < c.images.size(); ++i) {
    const std::string& file = c.images[i];
    if (!results[i]) {
      ++failed;
      std::fprintf(stderr, "stoke classify: %s: %s\n", file.c_str(),
                   reasons[i].empty() ? "could not be read or decoded" : reasons[i].c_str());
      continue;
    }
    const std::vector<float>& p = *results[i];
    std::vector<std::size_t> order(classes);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(),
                      [&](std::size_t a, std::size_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    if (c.json) {
      Json j;
      j.field("file", file);
      j.begin_array("top");
      for (std::size_t k = 0; k < top; ++k) {
        j.begin_object();
        j.field("class", card.classes[order[k]]);
        j.field("probability", static_cast<double>(p[order[k]]));
        j.end_object();
      }
      j.end_array();
      std::printf("%s\n", j.str().c_str());
    } else {
      std::string line = file + ":";
      for (std::size_t k = 0; k < top; ++k) {
        char probability[32];
        std::snprintf(probability, sizeof probability, " %.3f", static_cast<double>(p[order[k]]));
        line += (k == 0 ? " " : ", ") + card.classes[order[k]] + probability;
      }
      std::printf("%s\n", line.c_str());
    }
  }
  std::fflush(stdout);
  return failed > 0 ? 1 : 0;
}

}  // namespace stoke::app
