#include "stoke/nn/activation.hpp"

#include <stdexcept>

namespace stoke::nn {

Tensor ReLU::forward_impl(const Tensor& x, Context& ctx) {
  // A new output rather than x overwritten: x may be needed again (a residual block's shortcut).
  Tensor y = ctx.backend.empty(x.shape(), x.dtype(), x.layout());
  ctx.backend.relu_forward(x, y);
  output_ = ctx.mode == Mode::train ? y : Tensor();
  return y;
}

Tensor ReLU::backward_impl(const Tensor& dy, Context& ctx) {
  if (dy.shape() != output_.shape()) {
    throw std::invalid_argument(describe() + ": the gradient " + dy.describe() + " is not shaped like the output " +
                                to_string(output_.shape()));
  }
  // A new dx rather than dy overwritten: whoever passed dy may still use it (a residual block
  // passes the same dy to its body and its shortcut).
  Tensor dx = ctx.backend.empty(dy.shape(), dy.dtype(), dy.layout());
  ctx.backend.relu_backward(output_, dy, dx);
  output_ = {};
  return dx;
}

}  // namespace stoke::nn
