// The models safetensors_fuzz loads its inputs into, shared with the seed writer so that the
// seeds' names, shapes and dtypes fit them (and mutations of the seeds reach the copying code).
#pragma once

#include <memory>

#include "stoke/nn/backend.hpp"
#include "stoke/nn/layer.hpp"
#include "stoke/nn/linear.hpp"
#include "stoke/nn/models.hpp"
#include "stoke/nn/optimizer.hpp"

namespace stoke::nn::fuzz {

/// small_cnn at its smallest useful size: 1 input channel, width 2, 2 classes (a few KB of
/// weights, so seeds stay small and each input runs fast).
inline std::unique_ptr<Sequential> tiny_cnn() {
  return make_model("small_cnn", {.classes = 2, .in_channels = 1, .seed = 1, .width = 2});
}

/// One Linear layer named "fc": "fc.weight" {2, 3} and "fc.bias" {2}.
inline std::unique_ptr<Sequential> tiny_linear() {
  auto model = std::make_unique<Sequential>();
  model->emplace<Linear>("fc", LinearOptions{.in_features = 3, .out_features = 2, .bias = true, .seed = 2});
  return model;
}

}  // namespace stoke::nn::fuzz
