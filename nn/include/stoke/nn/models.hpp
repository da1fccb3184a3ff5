// The built-in models: a small CNN for 32-64 px images, ResNet-18 and ResNet-50 in the standard
// ImageNet layouts (any number of classes), and a small MobileNet-style network of
// depthwise-separable blocks. Parameter names are torchvision's where torchvision has the model
// ("layer1.0.conv1.weight", "fc.bias"), so checkpoints read like PyTorch state dicts.
//
//   std::unique_ptr<Sequential> model = make_model("resnet50", {.classes = 1000, .seed = 1});
//   for (const ModelInfo& m : model_catalog()) std::cout << m.name << ": " << m.summary << "\n";
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "stoke/nn/layer.hpp"

namespace stoke::nn {

struct ModelOptions {
  int classes = 10;
  /// The input's channels: 3 for RGB photos, 1 for grayscale scans, N for multispectral data.
  int in_channels = 3;
  /// Initial weights are a function of this seed only.
  std::uint64_t seed = 0;
  /// The channels of the first stage (small_cnn: 32, doubled at each of its four stages;
  /// mobilenet: 32); ignored by the ResNets, which are the standard widths.
  int width = 0;
  float dropout = 0;  ///< before the classifier (small_cnn, mobilenet)
  /// Each batch norm fused with the ReLU after it, and a residual block's sum and ReLU with the
  /// block's last batch norm (BatchNorm2dOptions::relu, Residual::joined): one pass over the
  /// activations where the backend fuses them (CUDA, channels-last). The same parameters, names
  /// and checkpoints either way, and on the CPU the same results bit for bit; false builds
  /// torchvision's separate ReLU layers.
  bool fuse = true;
};

struct ModelInfo {
  std::string_view name;
  std::string_view summary;  ///< one line: what it is and the input sizes it suits
};

/// The names make_model() knows, with a line each.
std::span<const ModelInfo> model_catalog() noexcept;
/// Their names as a list: "small_cnn, mobilenet, resnet18, resnet50".
std::string model_names();

/// The model `name` ("small_cnn", "resnet18", "resnet50", "mobilenet") on the CPU, in f32 NCHW.
/// Throws std::invalid_argument for an unknown name (listing the known ones), classes < 1 or
/// in_channels < 1.
std::unique_ptr<Sequential> make_model(std::string_view name, const ModelOptions& options);

/// Parameters (scalars) of a model.
std::int64_t parameter_count(Layer& model);

}  // namespace stoke::nn
