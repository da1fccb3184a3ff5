// Training losses: the Loss interface, and two losses of logits {N, K} averaged over the batch --
// SoftmaxCrossEntropy against class labels (torch.nn.CrossEntropyLoss, with label smoothing) and
// BinaryCrossEntropyWithLogits against multi-label targets (torch.nn.BCEWithLogitsLoss).
//
//   SoftmaxCrossEntropy loss({.label_smoothing = 0.1f});
//   LossResult r = loss.forward(logits, labels, ctx, /*grad_scale=*/1.0f);  // r.dlogits for backward
//   LossStats s = r.read(ctx.backend.stream());    // loss and correct count, copied to the host
//
// A loss keeps no state: forward() is const, and one loss may serve several threads, each with
// its own context and backend.
#pragma once

#include <cstdint>
#include <string_view>

#include "stoke/nn/layer.hpp"

namespace stoke::nn {

struct LossStats {
  double loss = 0;  ///< the mean loss over the batch
  /// Rows the loss counts as right: for SoftmaxCrossEntropy the rows whose largest logit is the
  /// label; for BinaryCrossEntropyWithLogits the rows whose every prediction (logit > 0) equals
  /// its target (target > 0.5), an exact match of the row's labels.
  std::int64_t correct = 0;
  std::int64_t count = 0;  ///< rows
};

struct LossResult {
  Tensor stats;    ///< {2} f32 on the device: mean loss, correct rows
  Tensor dlogits;  ///< the gradient of grad_scale * the mean loss; undefined in Mode::eval
  std::int64_t count = 0;
  /// The stats on the host (synchronises `stream` on a GPU).
  LossStats read(StreamView stream = StreamView::host()) const;
};

class Loss {
 public:
  virtual ~Loss() = default;

  /// The loss of `logits` {N, K} (N, K >= 1, on ctx.backend's device) against `targets`, whose
  /// form is the loss's own (class labels, multi-label targets): its stats, and in Mode::train
  /// dlogits = grad_scale * the gradient of the mean loss (in the logits' dtype). Throws
  /// std::invalid_argument, beginning with the loss's name, for logits of another shape or
  /// device, a not finite grad_scale, or targets that do not fit.
  LossResult forward(const Tensor& logits, const Tensor& targets, Context& ctx, float grad_scale = 1) const;
  /// "SoftmaxCrossEntropy", "BinaryCrossEntropyWithLogits": the class, for messages.
  virtual std::string_view name() const noexcept = 0;

 protected:
  Loss() = default;
  Loss(const Loss&) = default;
  Loss& operator=(const Loss&) = default;
  /// Checks `targets` against the logits (which forward() checked), then fills result.stats and,
  /// when it is defined, result.dlogits (both allocated by forward()).
  virtual void forward_impl(const Tensor& logits, const Tensor& targets, Context& ctx, float grad_scale,
                            LossResult& result) const = 0;
};

struct SoftmaxCrossEntropyOptions {
  float label_smoothing = 0;  ///< in [0, 1)
};

/// Backend::softmax_cross_entropy: targets are class labels {N} i32 in [0, K).
class SoftmaxCrossEntropy final : public Loss {
 public:
  /// Throws std::invalid_argument unless 0 <= label_smoothing < 1.
  explicit SoftmaxCrossEntropy(const SoftmaxCrossEntropyOptions& options = {});
  float label_smoothing() const noexcept { return options_.label_smoothing; }
  std::string_view name() const noexcept override { return "SoftmaxCrossEntropy"; }

 protected:
  /// Throws std::invalid_argument when labels are not {N} i32 on the backend's device;
  /// std::out_of_range (on the CPU) for a label outside [0, K), naming the row.
  void forward_impl(const Tensor& logits, const Tensor& labels, Context& ctx, float grad_scale,
                    LossResult& result) const override;

 private:
  SoftmaxCrossEntropyOptions options_;
};

struct BinaryCrossEntropyWithLogitsOptions {
  /// {K} f32 on the device the loss is used on, or undefined: the weight of each class's positive
  /// term (torch's pos_weight; > 1 favours recall of a rare label). Shared, not copied.
  Tensor pos_weight;
};

/// Backend::binary_cross_entropy_with_logits: K independent yes/no labels per row, targets
/// {N, K} f32 in [0, 1] (soft labels allowed), the loss averaged over all N K elements.
class BinaryCrossEntropyWithLogits final : public Loss {
 public:
  /// Throws std::invalid_argument for a pos_weight that is not f32 of rank 1.
  explicit BinaryCrossEntropyWithLogits(const BinaryCrossEntropyWithLogitsOptions& options = {});
  const Tensor& pos_weight() const noexcept { return options_.pos_weight; }
  std::string_view name() const noexcept override { return "BinaryCrossEntropyWithLogits"; }

 protected:
  /// Throws std::invalid_argument when targets are not f32 of the logits' shape on the backend's
  /// device, or pos_weight is not {K} there.
  void forward_impl(const Tensor& logits, const Tensor& targets, Context& ctx, float grad_scale,
                    LossResult& result) const override;

 private:
  BinaryCrossEntropyWithLogitsOptions options_;
};

}  // namespace stoke::nn
