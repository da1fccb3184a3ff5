// `stoke classify`: the top classes of some images by a checkpoint of `stoke train`, with
// train::classify_files: the images go through the same input pipeline as validation images, so
// they are seen exactly as the model was evaluated on them; an image that cannot be read or
// decoded is reported and skipped, and the others are still classified. This file parses the
// options and prints.
#include <cstdio>
#include <iostream>
#include <stoke/train/compute.hpp>
#include <stoke/train/evaluate.hpp>
#include <stoke/train/json.hpp>
#include <stoke/train/metrics.hpp>
#include <string>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "progress.hpp"

namespace stoke::app {

using namespace stoke::train;  // NOLINT(google-build-using-namespace): the commands are glue over it
namespace {

namespace po = boost::program_options;

struct ClassifyConfig {
  std::string checkpoint;
  std::vector<std::string> images;
  int top = 5;
  std::string device = "auto";
  std::string channels_last = "auto";
  bool json = false;
};

// One image's line: "FILE: a 0.912, b 0.051" or its JSON object.
void print_prediction(const FilePrediction& p, const ModelCard& card, std::size_t top, bool json) {
  const std::vector<std::size_t> order = top_classes(p.probabilities, top);
  if (json) {
    nlohmann::ordered_json classes = nlohmann::ordered_json::array();
    for (const std::size_t k : order) {
      classes.push_back({{"class", card.classes[k]}, {"probability", json_number(p.probabilities[k])}});
    }
    print_json({{"file", p.file}, {"top", std::move(classes)}});
    return;
  }
  std::string line = p.file + ":";
  for (std::size_t k = 0; k < order.size(); ++k) {
    char probability[32];
    std::snprintf(probability, sizeof probability, " %.3f", static_cast<double>(p.probabilities[order[k]]));
    line += (k == 0 ? " " : ", ") + card.classes[order[k]] + probability;
  }
  std::printf("%s\n", line.c_str());
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
      "channels-last", po::value(&c.channels_last)->default_value(c.channels_last), channels_last_help)(
      "json", po::bool_switch(&c.json),
      "one JSON object per image: {\"file\", \"top\": [{\"class\", \"probability\"}]}")(
      "image", po::value(&c.images)->composing(), "an image file (positional, repeatable)");
  cli.positional("image", -1);
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (c.checkpoint.empty()) return cli.usage_error("--checkpoint is required (a checkpoint written by `stoke train`)");
  if (c.images.empty()) return cli.usage_error("no images given: name one or more image files after the options");
  if (c.top < 1) return cli.usage_error("--top must be at least 1 (got " + std::to_string(c.top) + ")");

  ChannelsLast channels_last{};
  try {
    channels_last = parse_channels_last(c.channels_last);
  } catch (const std::invalid_argument& e) {
    return cli.usage_error(e.what());
  }

  ComputeContext compute = make_compute(c.device, c.json ? nullptr : &std::cerr);
  nn::Backend& backend = *compute.backend;
  const InferenceModel loaded = load_for_inference(c.checkpoint, backend, channels_last);
  const auto top = static_cast<std::size_t>(c.top);  // at most the model's classes: top_classes stops there

  int failed = 0;
  for (const FilePrediction& p : classify_files(loaded, c.images, backend)) {
    if (!p.ok()) {
      ++failed;
      std::fprintf(stderr, "stoke classify: %s: %s\n", p.file.c_str(), p.error.c_str());
      continue;
    }
    print_prediction(p, loaded.card, top, c.json);
  }
  std::fflush(stdout);
  return failed > 0 ? 1 : 0;
}

}  // namespace stoke::app
