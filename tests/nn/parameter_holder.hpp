// ParameterHolder: a layer that only holds parameters given by hand -- a name, 1-d values and
// whether weight decay applies -- the subject of the optimizer tests without any real layer.
//
//   Sequential model;
//   ParameterHolder& holder = model.emplace<ParameterHolder>("0");
//   Parameter& weight = holder.add("weight", {1, -2, 3});          // "0.weight", decayed
//   Parameter& bias = holder.add("bias", {0.5f}, /*decay=*/false);  // "0.bias"
#pragma once

#include <cstdint>
#include <deque>
#include <stoke/nn/layer.hpp>
#include <stoke/nn/tensor.hpp>
#include <string>
#include <utility>
#include <vector>

namespace stoke::nn::testing {

class ParameterHolder final : public Layer {
 public:
  /// A parameter of `values` named `name`, visited after those added before it. The reference
  /// stays valid as more are added (an optimizer keeps pointers to the parameters).
  Parameter& add(std::string name, const std::vector<float>& values, bool decay = true) {
    Parameter p{
        .value = Tensor::from_values({static_cast<std::int64_t>(values.size())}, values), .grad = {}, .decay = decay};
    return parameters_.emplace_back(std::move(name), std::move(p)).second;
  }

  void for_each_parameter(const ParameterVisitor& visit, const std::string& prefix) override {
    for (auto& [name, p] : parameters_) visit(join(prefix, name), p);
  }
  std::string describe() const override { return "ParameterHolder()"; }

 protected:
  Tensor forward_impl(const Tensor& x, Context&) override { return x; }
  Tensor backward_impl(const Tensor& dy, Context&) override { return dy; }

 private:
  std::deque<std::pair<std::string, Parameter>> parameters_;
};

/// Sets p's gradient to `values` (a new host tensor).
inline void set_grad(Parameter& p, const std::vector<float>& values) {
  p.grad = Tensor::from_values({static_cast<std::int64_t>(values.size())}, values);
}

}  // namespace stoke::nn::testing
