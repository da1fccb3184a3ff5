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

LossResult Loss::forward(const Tensor& logits, const Tensor& targets, Context& ctx, float grad_scale) const {
  const Device device = ctx.backend.device();
  if (logits.rank() != 2 || logits.dim(0) < 1 || logits.dim(1) < 1 || logits.device() != device) {
    throw std::invalid_argument(std::string(name()) + ": the logits are " + logits.describe() +
                                ", expected [N, K] (N, K >= 1) on " + device.str());
  }
  if (!std::isfinite(grad_scale)) {
    throw std::invalid_argument(std::string(name()) + ": grad_scale must be finite, not " + std::to_string(grad_scale));
  }
  LossResult result;
  result.count = logits.dim(0);
  result.stats = ctx.backend.empty({2});
  if (ctx.mode == Mode::train) result.dlogits = ctx.backend.empty(logits.shape(), logits.dtype());
  forward_impl(logits, targets, ctx, grad_scale, result);
  return result;
}

// ---- SoftmaxCrossEntropy

SoftmaxCrossEntropy::SoftmaxCrossEntropy(const SoftmaxCrossEntropyOptions& options) : options_(options) {
  if (!(options.label_smoothing >= 0 && options.label_smoothing < 1)) {
    throw std::invalid_argument("SoftmaxCrossEntropy: label_smoothing is " + std::to_string(options.label_smoothing) +
                                ", must be in [0, 1)");
  }
}

void SoftmaxCrossEntropy::forward_impl(const Tensor& logits, const Tensor& labels, Context& ctx, float grad_scale,
                                       LossResult& result) const {
  const Device device = ctx.backend.device();
  if (labels.rank() != 1 || labels.dim(0) != logits.dim(0) || labels.dtype() != DType::i32 ||
      labels.device() != device) {
    throw std::invalid_argument("SoftmaxCrossEntropy: the labels are " + labels.describe() + ", expected i32[" +
                                std::to_string(logits.dim(0)) + "] on " + device.str() +
                                " (one class index per row of the logits)");
  }
  ctx.backend.softmax_cross_entropy(logits, labels, options_.label_smoothing, grad_scale, result.stats, result.dlogits);
}

// ---- BinaryCrossEntropyWithLogits

BinaryCrossEntropyWithLogits::BinaryCrossEntropyWithLogits(const BinaryCrossEntropyWithLogitsOptions& options)
    : options_(options) {
  const Tensor& w = options.pos_weight;
  if (w.defined() && (w.rank() != 1 || w.dtype() != DType::f32)) {
    throw std::invalid_argument("BinaryCrossEntropyWithLogits: pos_weight is " + w.describe() +
                                ", expected f32[K] (one weight per class)");
  }
}

void BinaryCrossEntropyWithLogits::forward_impl(const Tensor& logits, const Tensor& targets, Context& ctx,
                                                float grad_scale, LossResult& result) const {
  const Device device = ctx.backend.device();
  if (targets.shape() != logits.shape() || targets.dtype() != DType::f32 || targets.device() != device) {
    throw std::invalid_argument("BinaryCrossEntropyWithLogits: the targets are " + targets.describe() +
                                ", expected f32" + to_string(logits.shape()) + " on " + device.str() +
                                " (one target in [0, 1] per logit)");
  }
  const Tensor& w = options_.pos_weight;
  if (w.defined() && (w.dim(0) != logits.dim(1) || w.device() != device)) {
    throw std::invalid_argument("BinaryCrossEntropyWithLogits: pos_weight is " + w.describe() + ", expected f32[" +
                                std::to_string(logits.dim(1)) + "] on " + device.str() +
                                " (one weight per class of the logits)");
  }
  ctx.backend.binary_cross_entropy_with_logits(logits, targets, w, grad_scale, result.stats, result.dlogits);
}

}  // namespace stoke::nn
