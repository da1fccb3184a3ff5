// The training loss: softmax cross-entropy of logits {N, K} against class labels {N} (i32), with
// optional label smoothing, averaged over the batch, as torch.nn.CrossEntropyLoss.
//
//   SoftmaxCrossEntropy loss({.label_smoothing = 0.1f});
//   LossResult r = loss.forward(logits, labels, ctx, /*grad_scale=*/1.0f);  // r.dlogits for backward
//   LossStats s = r.read(ctx.backend.stream());    // loss and correct count, copied to the host
#pragma once

#include <cstdint>

#include "stoke/nn/layer.hpp"

namespace stoke::nn {

struct LossStats {
  double loss = 0;           ///< the mean loss over the batch
  std::int64_t correct = 0;  ///< rows whose largest logit is the label
  std::int64_t count = 0;    ///< rows
};

struct LossResult {
  Tensor stats;    ///< {2} f32 on the device: mean loss, correct rows
  Tensor dlogits;  ///< the gradient of grad_scale * the mean loss; undefined in Mode::eval
  std::int64_t count = 0;
  /// The stats on the host (synchronises `stream` on a GPU).
  LossStats read(StreamView stream = StreamView::host()) const;
};

struct SoftmaxCrossEntropyOptions {
  float label_smoothing = 0;  ///< in [0, 1)
};

class SoftmaxCrossEntropy {
 public:
  /// Throws std::invalid_argument unless 0 <= label_smoothing < 1.
  explicit SoftmaxCrossEntropy(const SoftmaxCrossEntropyOptions& options = {});
  /// Throws std::invalid_argument when logits are not {N, K} on the backend's device or labels not
  /// {N} i32 there; std::out_of_range (on the CPU) for a label outside [0, K), naming the row.
  LossResult forward(const Tensor& logits, const Tensor& labels, Context& ctx, float grad_scale = 1) const;
  float label_smoothing() const noexcept { return options_.label_smoothing; }

 private:
  SoftmaxCrossEntropyOptions options_;
};

}  // namespace stoke::nn
