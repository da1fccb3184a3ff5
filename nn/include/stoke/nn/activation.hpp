// ReLU: y = max(x, 0). The input is left as it is; the output is kept for backward, which needs
// only y.
#pragma once

#include "stoke/nn/layer.hpp"

namespace stoke::nn {

class ReLU : public Layer {
 public:
  ReLU() = default;
  void release_activations() override { output_ = {}; }
  std::string describe() const override { return "ReLU()"; }

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  Tensor output_;
};

}  // namespace stoke::nn
