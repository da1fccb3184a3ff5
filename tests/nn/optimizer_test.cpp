// nn's Sgd against torch.optim.SGD: momentum, weight decay only where Parameter::decay,
// Nesterov, grad_scale, zeroed gradients after a step, and its argument checks.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/layer.hpp>
#include <stoke/nn/optimizer.hpp>
#include <stoke/nn/tensor.hpp>
#include <string>
#include <utility>
#include <vector>

#include "../gpu/expect_throw.hpp"
#include "parameter_holder.hpp"

namespace stoke::nn {
namespace {

using gpu::test::expect_throw_mentioning;
using testing::set_grad;

// The model: Sequential{"0": a ParameterHolder} with a decayed "weight" and an undecayed "bias",
// so that names carry a prefix, as in a real model.
struct Model {
  std::unique_ptr<Backend> backend = make_backend(Device::cpu());
  Sequential sequential;
  testing::ParameterHolder& holder = sequential.emplace<testing::ParameterHolder>("0");
  Parameter& weight = holder.add("weight", {1, -2, 3});
  Parameter& bias = holder.add("bias", {0.5f}, /*decay=*/false);
};

void expect_values(const Tensor& t, const std::vector<float>& expected, const std::string& what) {
  const std::vector<float> got = t.to_vector();
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 2e-6) << what << " element " << i;
}

// Two steps of lr 0.1, weight decay 0.01 on the weight only, gradients
//   step 1: weight {0.5, -1, 2}, bias {0.25};  step 2: weight {-1.5, 0.5, 1}, bias {-0.75}
// each multiplied by grad_scale. The expected numbers come from torch 1.13's torch.optim.SGD with
// two parameter groups (weight_decay 0.01 and 0) given the same gradients (times the scale).
void two_steps(Model& m, Sgd& sgd, float grad_scale) {
  set_grad(m.weight, {0.5f, -1, 2});
  set_grad(m.bias, {0.25f});
  sgd.step(0.1f, grad_scale);
  set_grad(m.weight, {-1.5f, 0.5f, 1});
  set_grad(m.bias, {-0.75f});
  sgd.step(0.1f, grad_scale);
}

std::vector<std::pair<std::string, std::vector<float>>> states(Sgd& sgd) {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  sgd.for_each_state([&](const std::string& name, Tensor& buffer) { out.emplace_back(name, buffer.to_vector()); });
  return out;
}

TEST(Sgd, CollectsTheModelsParametersAndZeroedMomentum) {
  Model m;
  Sgd sgd(m.sequential, *m.backend);
  EXPECT_EQ(sgd.parameter_count(), 2u);
  EXPECT_EQ(sgd.element_count(), 4);
  EXPECT_EQ(sgd.options().momentum, 0.9f);
  const auto buffers = states(sgd);
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_EQ(buffers[0].first, "momentum_buffer.0.weight");  // as a checkpoint names it after "optimizer."
  EXPECT_EQ(buffers[0].second, (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(buffers[1].first, "momentum_buffer.0.bias");
  EXPECT_EQ(buffers[1].second, (std::vector<float>{0}));
}

TEST(Sgd, MomentumAndDecayOnlyWhereParameterDecaysMatchTorch) {
  Model m;
  Sgd sgd(m.sequential, *m.backend, {.momentum = 0.9f, .weight_decay = 0.01f, .nesterov = false});
  set_grad(m.weight, {0.5f, -1, 2});
  set_grad(m.bias, {0.25f});
  sgd.step(0.1f);
  expect_values(m.weight.value, {0.949f, -1.898f, 2.797f}, "weight after step 1");
  expect_values(m.bias.value, {0.475f}, "bias after step 1 (no decay)");
  set_grad(m.weight, {-1.5f, 0.5f, 1});
  set_grad(m.bias, {-0.75f});
  sgd.step(0.1f);
  expect_values(m.weight.value, {1.0521509647f, -1.8543020487f, 2.5115029812f}, "weight after step 2");
  expect_values(m.bias.value, {0.5275f}, "bias after step 2");
  const auto buffers = states(sgd);
  expect_values(Tensor::from_values({3}, buffers[0].second), {-1.031510f, -0.436980f, 2.854970f}, "momentum weight");
  expect_values(Tensor::from_values({1}, buffers[1].second), {-0.525f}, "momentum bias");
}

TEST(Sgd, NesterovMatchesTorch) {
  Model m;
  Sgd sgd(m.sequential, *m.backend, {.momentum = 0.9f, .weight_decay = 0.01f, .nesterov = true});
  two_steps(m, sgd, 1);
  expect_values(m.weight.value, {1.1450741291f, -1.8151482344f, 2.2549028397f}, "weight");
  expect_values(m.bias.value, {0.57475f}, "bias");
}

TEST(Sgd, GradScaleMultipliesTheGradientBeforeDecay) {
  Model m;
  Sgd sgd(m.sequential, *m.backend, {.momentum = 0.9f, .weight_decay = 0.01f, .nesterov = false});
  two_steps(m, sgd, 0.5f);
  expect_values(m.weight.value, {1.0246260166f, -1.9242519140f, 2.7514030933f}, "weight");
  expect_values(m.bias.value, {0.51375f}, "bias");
}

TEST(Sgd, ZeroMomentumIsPlainSgdWithoutBuffers) {
  Model m;
  Sgd sgd(m.sequential, *m.backend, {.momentum = 0, .weight_decay = 0.01f, .nesterov = false});
  EXPECT_TRUE(states(sgd).empty());
  two_steps(m, sgd, 1);
  expect_values(m.weight.value, {1.0980509520f, -1.9461020231f, 2.6942029000f}, "weight");
  expect_values(m.bias.value, {0.55f}, "bias");
}

TEST(Sgd, StepZeroesTheGradientsAndSkipsParametersWithout) {
  Model m;
  Sgd sgd(m.sequential, *m.backend, {.momentum = 0.9f, .weight_decay = 0.01f, .nesterov = false});
  set_grad(m.weight, {0.5f, -1, 2});
  sgd.step(0.1f);  // the bias has no gradient: untouched, as torch skips a grad of None
  EXPECT_EQ(m.weight.grad.to_vector(), (std::vector<float>{0, 0, 0}));
  EXPECT_FALSE(m.bias.grad.defined());
  EXPECT_EQ(m.bias.value.to_vector(), (std::vector<float>{0.5f}));
  EXPECT_EQ(states(sgd)[1].second, (std::vector<float>{0}));

  set_grad(m.bias, {3});
  sgd.zero_grad();
  EXPECT_EQ(m.bias.grad.to_vector(), (std::vector<float>{0}));
  // A step on zero gradients still decays the weight (and moves it with its momentum), as torch.
  const std::vector<float> before = m.weight.value.to_vector();
  sgd.step(0.1f);
  EXPECT_NE(m.weight.value.to_vector(), before);
  EXPECT_EQ(m.bias.value.to_vector(), (std::vector<float>{0.5f}));
}

TEST(Sgd, RejectsBadOptionsAndArguments) {
  Model m;
  expect_throw_mentioning<std::invalid_argument>(
      [&] { Sgd(m.sequential, *m.backend, {.momentum = -0.1f, .weight_decay = 0, .nesterov = false}); }, "momentum");
  expect_throw_mentioning<std::invalid_argument>(
      [&] { Sgd(m.sequential, *m.backend, {.momentum = 0.9f, .weight_decay = -1, .nesterov = false}); },
      "weight_decay");
  expect_throw_mentioning<std::invalid_argument>(
      [&] { Sgd(m.sequential, *m.backend, {.momentum = 0, .weight_decay = 0, .nesterov = true}); },
      "nesterov needs a momentum > 0");
  Sgd sgd(m.sequential, *m.backend);
  expect_throw_mentioning<std::invalid_argument>([&] { sgd.step(-0.1f); }, "learning rate");
  expect_throw_mentioning<std::invalid_argument>([&] { sgd.step(0.1f, 1.0f / 0.0f); }, "grad_scale");
}

TEST(Sgd, RejectsParametersItCannotUpdate) {
  Model m;
  m.bias.value = Tensor({1}, DType::bf16);
  expect_throw_mentioning<std::invalid_argument>([&] { Sgd(m.sequential, *m.backend); }, "parameter '0.bias'");
}

}  // namespace
}  // namespace stoke::nn
