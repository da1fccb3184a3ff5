// What a checkpoint of `stoke train` carries for inference (the model card: model name, image
// size, class names, evaluation transforms), and a model restored from one.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/layer.hpp>
#include <string>
#include <vector>

#include "stoke/train/compute.hpp"

namespace stoke::train {

/// Checkpoint metadata for inference (Trainer::set_metadata): the model's name, its image size,
/// the class names and the evaluation transforms.
struct ModelCard {
  std::string model;
  int image_size = 0;
  std::vector<std::string> classes;
  std::vector<std::string> eval_transforms;
  /// The input's channels and how images were decoded for it ("rgb" or "keep", DecodeColor);
  /// checkpoints from before they were recorded are RGB.
  int channels = 3;
  std::string color = "rgb";
};
std::map<std::string, std::string> to_metadata(const ModelCard& card);
/// Throws std::runtime_error naming `source` (the checkpoint) when an entry is missing.
ModelCard model_card_from(const std::map<std::string, std::string>& metadata, const std::string& source);

/// A model restored from a `stoke train` checkpoint for inference: the card, and the model with
/// the checkpoint's weights on the backend's device.
struct InferenceModel {
  ModelCard card;
  std::unique_ptr<nn::Sequential> model;
};
/// Reads the card from the checkpoint's header, builds the model it names with its classes on
/// `backend`'s device, in `layout` for f32 (compute_layout), and loads the weights (a checkpoint
/// holds them NCHW whatever layout trained it). Throws std::runtime_error naming the file when it
/// cannot be read, is not a (complete) safetensors file, has no card (not written by `stoke
/// train`), or its weights do not fit the model the card names; std::invalid_argument when the
/// backend cannot compute in that layout.
InferenceModel load_for_inference(const std::filesystem::path& checkpoint, nn::Backend& backend,
                                  ChannelsLast layout = ChannelsLast::automatic);

}  // namespace stoke::train
