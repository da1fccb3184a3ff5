#include "stoke/nn/loss.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace stoke::nn {

LossStats LossResult::read(StreamView stream) const {
  if (!stats.defined()) throw std::logic_error("LossResult::read: no stats (a default-constructed result)");
  const std::vector<float> values = stats.to_vector(stream);
  return {.loss = values.at(0), .correct = std::llround(values.at(1)), .count = count};
}

SoftmaxCrossEntropy::SoftmaxCrossEntropy(const SoftmaxCrossEntropyOptions& options) : options_(options) {
  if (!(options.label_smoothing >= 0 && options.label_smoothing < 1)) {
    throw std::invalid_argument("SoftmaxCrossEntropy: label_smoothing is " + std::to_string(options.label_smoothing) +
                                ", must be in [0, 1)");
  }
}

LossResult SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& labels, Context& ctx,
                                        float grad_scale) const {
  const Device device = ctx.backend.device();
  if (logits.rank() != 2 || logits.dim(0) < 1 || logits.dim(1) < 1 || logits.device() != device) {
    throw std::invalid_argument("SoftmaxCrossEntropy: the logits are " + logits.describe() +
                                ", expected [N, K] (N, K >= 1) on " + device.str());
  }
  if (labels.rank() != 1 || labels.dim(0) != logits.dim(0) || labels.dtype() != DType::i32 ||
      labels.device() != device) {
    throw std::invalid_argument("SoftmaxCrossEntropy: the labels are " + labels.describe() + ", expected i32[" +
                                std::to_string(logits.dim(0)) + "] on " + device.str() +
                                " (one class index per row of the logits)");
  }
  LossResult result;
  result.count = logits.dim(0);
  result.stats = ctx.backend.empty({2});
  if (ctx.mode == Mode::train) result.dlogits = ctx.backend.empty(logits.shape(), logits.dtype());
  ctx.backend.softmax_cross_entropy(logits, labels, options_.label_smoothing, grad_scale, result.stats, result.dlogits);
  return result;
}

}  // namespace stoke::nn
