#include "stoke/train/model_card.hpp"

#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <stoke/nn/checkpoint.hpp>
#include <stoke/nn/models.hpp>

namespace stoke::train {

namespace fs = std::filesystem;

namespace {

// Lists are stored one entry per line: class names are folder names, which have no newline.
std::string join_lines(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : "\n") + item;
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

std::map<std::string, std::string> to_metadata(const ModelCard& card) {
  return {{"model", card.model},
          {"image_size", std::to_string(card.image_size)},
          {"classes", join_lines(card.classes)},
          {"eval_transforms", join_lines(card.eval_transforms)},
          {"channels", std::to_string(card.channels)},
          {"color", card.color}};
}

ModelCard model_card_from(const std::map<std::string, std::string>& metadata, const std::string& source) {
  const auto get = [&](const char* key) -> const std::string& {
    const auto it = metadata.find(key);
    if (it == metadata.end()) {
      throw std::runtime_error(source + ": no '" + key +
                               "' in the checkpoint's metadata; only checkpoints written by `stoke train` carry the "
                               "model, its class names and its image size");
    }
    return it->second;
  };
  ModelCard card;
  card.model = get("model");
  card.image_size = std::atoi(get("image_size").c_str());
  card.classes = split_lines(get("classes"));
  card.eval_transforms = split_lines(get("eval_transforms"));
  // Optional: checkpoints written before they were recorded are RGB.
  if (const auto it = metadata.find("channels"); it != metadata.end()) card.channels = std::atoi(it->second.c_str());
  if (const auto it = metadata.find("color"); it != metadata.end()) card.color = it->second;
  if (card.channels < 1 || (card.color != "rgb" && card.color != "keep")) {
    throw std::runtime_error(source + ": the checkpoint's metadata is damaged (channels " +
                             std::to_string(card.channels) + ", color '" + card.color + "')");
  }
  if (card.image_size < 1 || card.classes.size() < 2) {
    throw std::runtime_error(source + ": the checkpoint's metadata is damaged (image_size '" + get("image_size") +
                             "', " + std::to_string(card.classes.size()) + " class names)");
  }
  return card;
}

InferenceModel load_for_inference(const fs::path& checkpoint, nn::Backend& backend, ChannelsLast layout) {
  // The header first: the card says which model to build, and a file that is not a checkpoint
  // fails here without its tensors being read.
  const std::string source = checkpoint.string();
  InferenceModel loaded{model_card_from(nn::read_checkpoint_metadata(checkpoint).extra, source), nullptr};
  try {
    loaded.model = nn::make_model(loaded.card.model, {.classes = static_cast<int>(loaded.card.classes.size()),
                                                       .in_channels = loaded.card.channels});
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(source + ": the checkpoint's model cannot be built: " + e.what());
  }
  loaded.model->to(backend.device(), backend.stream());
  // Inference computes in f32; the checkpoint's NCHW weights load into either layout.
  loaded.model->to_layout(compute_layout(layout, backend, gpu::DType::f32), backend.stream());
  nn::load_weights(checkpoint, *loaded.model, backend.stream());
  return loaded;
}

}  // namespace stoke::train
