// Linear: y = x w^T + b, a fully connected layer on {N, in_features} inputs.
//
//   Linear fc({.in_features = 512, .out_features = 10});
#pragma once

#include <cstdint>

#include "stoke/nn/weighted_layer.hpp"

namespace stoke::nn {

struct LinearOptions {
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  bool bias = true;
  /// Weights and bias drawn from U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's default), a function of
  /// this seed only.
  std::uint64_t seed = 0;
};

/// Its weight is {out_features, in_features}; its bias {out_features}.
class Linear : public WeightedLayer {
 public:
  /// Throws std::invalid_argument for features below 1.
  explicit Linear(const LinearOptions& options);

  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }
  std::string describe() const override;

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  std::int64_t in_;
  std::int64_t out_;
};

}  // namespace stoke::nn
