#include "stoke/nn/models.hpp"

#include <array>
#include <stdexcept>
#include <string>
#include <utility>

#include "stoke/nn/activation.hpp"
#include "stoke/nn/batch_norm.hpp"
#include "stoke/nn/conv2d.hpp"
#include "stoke/nn/dropout.hpp"
#include "stoke/nn/linear.hpp"
#include "stoke/nn/pooling.hpp"

namespace stoke::nn {

namespace {

constexpr std::array catalog{
    ModelInfo{"small_cnn",
              "4 conv-BN-ReLU stages (32, 64, 128, 256 channels; max pooling between) and a linear "
              "classifier; 32-64 px inputs"},
    ModelInfo{"mobilenet",
              "a small MobileNet: a 3x3 stem and 6 depthwise-separable blocks (32-512 channels); "
              "32-224 px inputs"},
    ModelInfo{"resnet18", "ResNet-18 (basic blocks 2-2-2-2, torchvision's layout); 224 px ImageNet-style inputs"},
    ModelInfo{"resnet50", "ResNet-50 (bottleneck blocks 3-4-6-3, torchvision's layout); 224 px ImageNet-style inputs"},
};

// Each layer gets its own seed, drawn in construction order: a model is a function of its seed.
class Seeds {
 public:
  explicit Seeds(std::uint64_t seed) : next_(seed * 0x9e3779b97f4a7c15ULL + 1) {}
  std::uint64_t operator()() { return next_++; }

 private:
  std::uint64_t next_;
};

// BN -> ReLU named `bn` and `relu`: one BatchNorm2d with its ReLU fused when `fuse`.
void bn_relu(Sequential& into, std::int64_t channels, bool fuse, const std::string& bn, const std::string& relu) {
  into.emplace<BatchNorm2d>(bn, BatchNorm2dOptions{.channels = channels, .relu = fuse});
  if (!fuse) into.emplace<ReLU>(relu);
}

// conv -> BN -> ReLU under the names torchvision's MobileNet-like models use ("0", "1", "2") or
// given ones.
void conv_bn_relu(Sequential& into, Seeds& seeds, std::int64_t in, std::int64_t out, int kernel, int stride, int groups,
                  bool fuse, const std::string& conv, const std::string& bn, const std::string& relu) {
  into.emplace<Conv2d>(conv, Conv2dOptions{.in_channels = in,
                                           .out_channels = out,
                                           .kernel = kernel,
                                           .stride = stride,
                                           .padding = kernel / 2,
                                           .groups = groups,
                                           .seed = seeds()});
  bn_relu(into, out, fuse, bn, relu);
}

void classifier(Sequential& model, Seeds& seeds, std::int64_t features, const ModelOptions& options) {
  model.emplace<GlobalAvgPool>("avgpool");
  if (options.dropout > 0) model.emplace<Dropout>("dropout", options.dropout, seeds());
  model.emplace<Linear>("fc", LinearOptions{.in_features = features, .out_features = options.classes, .seed = seeds()});
}

std::unique_ptr<Sequential> small_cnn(const ModelOptions& options) {
  Seeds seeds(options.seed);
  const std::int64_t w = options.width > 0 ? options.width : 32;
  auto model = std::make_unique<Sequential>();
  conv_bn_relu(*model, seeds, options.in_channels, w, 3, 1, 1, options.fuse, "conv1", "bn1", "relu1");
  model->emplace<MaxPool2d>("pool1", Pool2dGeometry{.kernel = 2, .stride = 2});
  conv_bn_relu(*model, seeds, w, 2 * w, 3, 1, 1, options.fuse, "conv2", "bn2", "relu2");
  model->emplace<MaxPool2d>("pool2", Pool2dGeometry{.kernel = 2, .stride = 2});
  conv_bn_relu(*model, seeds, 2 * w, 4 * w, 3, 1, 1, options.fuse, "conv3", "bn3", "relu3");
  model->emplace<MaxPool2d>("pool3", Pool2dGeometry{.kernel = 2, .stride = 2});
  conv_bn_relu(*model, seeds, 4 * w, 8 * w, 3, 1, 1, options.fuse, "conv4", "bn4", "relu4");
  classifier(*model, seeds, 8 * w, options);
  return model;
}

std::unique_ptr<Sequential> mobilenet(const ModelOptions& options) {
  Seeds seeds(options.seed);
  const std::int64_t w = options.width > 0 ? options.width : 32;
  auto model = std::make_unique<Sequential>();
  auto stem = std::make_unique<Sequential>();
  conv_bn_relu(*stem, seeds, options.in_channels, w, 3, 2, 1, options.fuse, "0", "1", "2");
  model->add(std::move(stem), "stem");
  // (output channels as multiples of w, stride) of each depthwise-separable block.
  constexpr std::array<std::pair<int, int>, 6> blocks{{{2, 1}, {4, 2}, {4, 1}, {8, 2}, {8, 1}, {16, 2}}};
  std::int64_t channels = w;
  auto features = std::make_unique<Sequential>();
  for (const auto& [multiple, stride] : blocks) {
    const std::int64_t out = w * multiple;
    auto block = std::make_unique<Sequential>();
    const int depthwise = static_cast<int>(channels);  // groups: one per channel
    conv_bn_relu(*block, seeds, channels, channels, 3, stride, depthwise, options.fuse, "0", "1", "2");
    conv_bn_relu(*block, seeds, channels, out, 1, 1, 1, options.fuse, "3", "4", "5");  // pointwise
    features->add(std::move(block));
    channels = out;
  }
  model->add(std::move(features), "features");
  classifier(*model, seeds, channels, options);
  return model;
}

// One ResNet block (torchvision's BasicBlock or Bottleneck, stride on the 3x3 conv), with a
// 1x1 conv + BN downsample when the shape changes, and the last BN's gamma starting at zero.
// Fused: its batch norms take the ReLUs, the last one the sum too (Residual::joined).
std::unique_ptr<Layer> resnet_block(Seeds& seeds, std::int64_t in, std::int64_t planes, int stride, bool bottleneck,
                                    bool fuse) {
  const std::int64_t expansion = bottleneck ? 4 : 1;
  const std::int64_t out = planes * expansion;
  auto conv = [&](std::int64_t cin, std::int64_t cout, int kernel, int s) {
    return std::make_unique<Conv2d>(Conv2dOptions{.in_channels = cin,
                                                  .out_channels = cout,
                                                  .kernel = kernel,
                                                  .stride = s,
                                                  .padding = kernel / 2,
                                                  .seed = seeds()});
  };
  auto last_bn = [&](std::int64_t channels) {
    return std::make_unique<BatchNorm2d>(BatchNorm2dOptions{.channels = channels, .zero_gamma = true, .relu = fuse});
  };
  auto body = std::make_unique<Sequential>();
  if (bottleneck) {
    body->add(conv(in, planes, 1, 1), "conv1");
    bn_relu(*body, planes, fuse, "bn1", "relu1");
    body->add(conv(planes, planes, 3, stride), "conv2");
    bn_relu(*body, planes, fuse, "bn2", "relu2");
    body->add(conv(planes, out, 1, 1), "conv3");
    body->add(last_bn(out), "bn3");
  } else {
    body->add(conv(in, planes, 3, stride), "conv1");
    bn_relu(*body, planes, fuse, "bn1", "relu1");
    body->add(conv(planes, planes, 3, 1), "conv2");
    body->add(last_bn(planes), "bn2");
  }
  std::unique_ptr<Sequential> shortcut;
  if (stride != 1 || in != out) {
    shortcut = std::make_unique<Sequential>();
    shortcut->add(conv(in, out, 1, stride), "0");
    shortcut->emplace<BatchNorm2d>("1", BatchNorm2dOptions{.channels = out});
  }
  if (fuse) return Residual::joined(std::move(body), std::move(shortcut));
  return std::make_unique<Residual>(std::move(body), std::move(shortcut), std::make_unique<ReLU>());
}

std::unique_ptr<Sequential> resnet(const ModelOptions& options, const std::array<int, 4>& depths, bool bottleneck) {
  Seeds seeds(options.seed);
  auto model = std::make_unique<Sequential>();
  model->emplace<Conv2d>(
      "conv1",
      Conv2dOptions{.in_channels = options.in_channels, .out_channels = 64, .kernel = 7, .stride = 2, .padding = 3, .seed = seeds()});
  bn_relu(*model, 64, options.fuse, "bn1", "relu");
  model->emplace<MaxPool2d>("maxpool", Pool2dGeometry{.kernel = 3, .stride = 2, .padding = 1});
  std::int64_t channels = 64;
  for (std::size_t stage = 0; stage < depths.size(); ++stage) {
    const std::int64_t planes = std::int64_t{64} << stage;
    auto layer = std::make_unique<Sequential>();
    for (int i = 0; i < depths[stage]; ++i) {
      const int stride = (stage > 0 && i == 0) ? 2 : 1;
      layer->add(resnet_block(seeds, channels, planes, stride, bottleneck, options.fuse));
      channels = planes * (bottleneck ? 4 : 1);
    }
    model->add(std::move(layer), "layer" + std::to_string(stage + 1));
  }
  classifier(*model, seeds, channels, options);
  return model;
}

}  // namespace

std::span<const ModelInfo> model_catalog() noexcept { return catalog; }

std::string model_names() {
  std::string names;
  for (const ModelInfo& info : catalog) names += (names.empty() ? "" : ", ") + std::string(info.name);
  return names;
}

std::unique_ptr<Sequential> make_model(std::string_view name, const ModelOptions& options) {
  if (options.classes < 1) {
    throw std::invalid_argument("make_model: classes is " + std::to_string(options.classes) + "; it must be >= 1");
  }
  if (options.in_channels < 1) {
    throw std::invalid_argument("make_model: in_channels is " + std::to_string(options.in_channels) +
                                "; it must be >= 1");
  }
  if (name == "small_cnn") return small_cnn(options);
  if (name == "mobilenet") return mobilenet(options);
  if (name == "resnet18") return resnet(options, {2, 2, 2, 2}, false);
  if (name == "resnet50") return resnet(options, {3, 4, 6, 3}, true);
  throw std::invalid_argument("unknown model '" + std::string(name) + "'; the models are: " + model_names());
}

std::int64_t parameter_count(Layer& model) {
  std::int64_t count = 0;
  model.for_each_parameter([&](const std::string&, Parameter& p) { count += p.value.numel(); });
  return count;
}

}  // namespace stoke::nn
