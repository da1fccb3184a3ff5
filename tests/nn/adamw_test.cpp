// nn's AdamW against torch.optim.AdamW over several steps (both moments, bias correction,
// decoupled weight decay only where Parameter::decay, grad_scale, a parameter that gets its first
// gradient late), every update against an independent float64 implementation of the formula over
// many random steps, its state through a checkpoint, a checkpoint of another optimizer refused,
// and its argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <stoke/base/random.hpp>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/checkpoint.hpp>
#include <stoke/nn/layer.hpp>
#include <stoke/nn/optimizer.hpp>
#include <stoke/nn/safetensors.hpp>
#include <stoke/nn/tensor.hpp>
#include <string>
#include <utility>
#include <vector>

#include "../gpu/expect_throw.hpp"
#include "parameter_holder.hpp"
#include "temp_folder.hpp"

namespace stoke::nn {
namespace {

namespace fs = std::filesystem;
using gpu::test::expect_throw_mentioning;
using testing::set_grad;

// The model: Sequential{"0": a ParameterHolder} with a decayed "weight", an undecayed "bias" and
// a decayed "late" (which the tests give a gradient only from some step on).
struct Model {
  explicit Model(const std::vector<float>& weight_values = {1, -2, 3}, const std::vector<float>& bias_values = {0.5f},
                 const std::vector<float>& late_values = {0.1f, 0.2f})
      : weight(holder.add("weight", weight_values)),
        bias(holder.add("bias", bias_values, /*decay=*/false)),
        late(holder.add("late", late_values)) {}
  std::unique_ptr<Backend> backend = make_backend(Device::cpu());
  Sequential sequential;
  testing::ParameterHolder& holder = sequential.emplace<testing::ParameterHolder>("0");
  Parameter& weight;
  Parameter& bias;
  Parameter& late;
};

void expect_values(const Tensor& t, const std::vector<double>& expected, const std::string& what) {
  const std::vector<float> got = t.to_vector();
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], expected[i], 2e-6 + 2e-6 * std::abs(expected[i])) << what << " element " << i;
  }
}

std::map<std::string, Tensor> states(Optimizer& optimizer) {
  std::map<std::string, Tensor> out;
  optimizer.for_each_state([&](const std::string& name, Tensor& t) { out.emplace(name, t); });
  return out;
}

std::int32_t step_of(Optimizer& optimizer, const std::string& parameter) {
  return *states(optimizer).at("step." + parameter).data_as<std::int32_t>();
}

// Three steps at learning rates 0.01, 0.02, 0.005 with betas (0.9, 0.99), eps 1e-6, weight decay
// 0.1 on "weight" and "late" (none on "bias") and grad_scale 0.5; "late" has no gradient until the
// third step. The expected numbers come from torch 1.13's torch.optim.AdamW in float64 with two
// parameter groups (weight_decay 0.1 for weight and late, 0 for bias), given the same gradients
// times 0.5, late.grad None for the first two steps.
TEST(AdamW, StepsMatchTorch) {
  Model m;
  AdamW adamw(m.sequential, *m.backend, {.beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0.1f});
  set_grad(m.weight, {0.5f, -1, 2});
  set_grad(m.bias, {0.25f});
  adamw.step(0.01f, 0.5f);
  expect_values(m.weight.value, {0.98900003999984, -1.98800001999996, 2.98700000999999}, "weight, step 1");
  expect_values(m.bias.value, {0.49000007999936}, "bias, step 1 (no decay)");
  expect_values(m.late.value, {0.1, 0.2}, "late, step 1 (no gradient: untouched, no decay)");

  set_grad(m.weight, {-1.5f, 0.5f, 1});
  set_grad(m.bias, {-0.75f});
  adamw.step(0.02f, 0.5f);
  expect_values(m.weight.value, {0.9968879853320989, -1.9786900448927993, 2.9623570735947626}, "weight, step 2");
  expect_values(m.bias.value, {0.4998660077983101}, "bias, step 2");
  expect_values(m.late.value, {0.1, 0.2}, "late, step 2");

  set_grad(m.weight, {0.25f, 0.25f, -0.5f});
  set_grad(m.bias, {1});
  set_grad(m.late, {0.3f, -0.6f});
  adamw.step(0.005f, 0.5f);
  expect_values(m.weight.value, {0.9977775078597316, -1.977392759995473, 2.9580484428257807}, "weight, step 3");
  expect_values(m.bias.value, {0.4985474454692107}, "bias, step 3");
  expect_values(m.late.value, {0.09495003333311113, 0.2048999833333889}, "late, its first step");

  const std::map<std::string, Tensor> s = states(adamw);
  expect_values(s.at("exp_avg.0.weight"), {-0.034749999999999996, -0.005500000000000001, 0.10099999999999998},
                "exp_avg of weight");
  expect_values(s.at("exp_avg_sq.0.weight"), {0.0063375625000000055, 0.003225250000000003, 0.012901000000000011},
                "exp_avg_sq of weight");
  expect_values(s.at("exp_avg.0.bias"), {0.026374999999999992}, "exp_avg of bias");
  expect_values(s.at("exp_avg_sq.0.bias"), {0.004045328125000003}, "exp_avg_sq of bias");
  expect_values(s.at("exp_avg.0.late"), {0.014999999999999996, -0.029999999999999992}, "exp_avg of late");
  expect_values(s.at("exp_avg_sq.0.late"), {0.00022500000000000018, 0.0009000000000000007}, "exp_avg_sq of late");
  EXPECT_EQ(step_of(adamw, "0.weight"), 3);
  EXPECT_EQ(step_of(adamw, "0.bias"), 3);
  EXPECT_EQ(step_of(adamw, "0.late"), 1) << "torch counts steps per parameter: late's bias correction starts late";
  EXPECT_EQ(m.weight.grad.to_vector(), (std::vector<float>{0, 0, 0})) << "a step zeroes the gradients";
}

// One AdamW step of one element in double, straight from the definition (decoupled decay, both
// moments, both bias corrections), for the float state stoke had before the step.
struct Reference {
  double param, exp_avg, exp_avg_sq;
  double update;     // |the step's change of param|, besides the decay
  double avg_terms;  // |beta1 exp_avg| + |(1 - beta1) g|: the size of exp_avg's rounding
};
Reference reference_step(double param, double grad, double exp_avg, double exp_avg_sq, double lr, double beta1,
                         double beta2, double eps, double weight_decay, double grad_scale, int t) {
  const double g = grad * grad_scale;
  const double m = beta1 * exp_avg + (1 - beta1) * g;
  const double v = beta2 * exp_avg_sq + (1 - beta2) * g * g;
  const double m_hat = m / (1 - std::pow(beta1, t));
  const double v_hat = v / (1 - std::pow(beta2, t));
  const double update = lr * m_hat / (std::sqrt(v_hat) + eps);
  return {param * (1 - lr * weight_decay) - update, m, v, std::abs(update),
          std::abs(beta1 * exp_avg) + std::abs((1 - beta1) * g)};
}

TEST(AdamW, EveryUpdateMatchesAFloat64Reference) {
  // Random gradients of every magnitude, random learning rates and grad scales, 200 steps; each
  // step compared with the double-precision formula applied to stoke's own state before it, so
  // float rounding cannot accumulate into the comparison.
  constexpr std::int64_t kElements = 257;
  std::vector<float> start(kElements);
  base::ItemRng init(5, 0, 0);
  for (float& v : start) v = static_cast<float>(init.uniform(-2, 2));
  Model m(start, {0.5f, -0.25f}, {1});
  const AdamWOptions options{.beta1 = 0.85f, .beta2 = 0.995f, .eps = 1e-7f, .weight_decay = 0.05f};
  AdamW adamw(m.sequential, *m.backend, options);
  const std::map<std::string, Tensor> s = states(adamw);
  base::ItemRng rng(6, 0, 0);
  for (int t = 1; t <= 200; ++t) {
    const auto lr = static_cast<float>(rng.uniform(1e-4, 0.1));
    const auto grad_scale = static_cast<float>(rng.uniform(0.1, 2));
    const double magnitude = std::pow(10.0, rng.uniform(-6, 2));
    std::vector<float> grad(kElements);
    for (float& g : grad) g = static_cast<float>(rng.uniform(-magnitude, magnitude));
    const std::vector<float> param = m.weight.value.to_vector();
    const std::vector<float> exp_avg = s.at("exp_avg.0.weight").to_vector();
    const std::vector<float> exp_avg_sq = s.at("exp_avg_sq.0.weight").to_vector();
    set_grad(m.weight, grad);
    adamw.step(lr, grad_scale);
    const std::vector<float> param_after = m.weight.value.to_vector();
    const std::vector<float> exp_avg_after = s.at("exp_avg.0.weight").to_vector();
    const std::vector<float> exp_avg_sq_after = s.at("exp_avg_sq.0.weight").to_vector();
    for (std::size_t i = 0; i < param.size(); ++i) {
      const Reference r = reference_step(param[i], grad[i], exp_avg[i], exp_avg_sq[i], lr, options.beta1, options.beta2,
                                         options.eps, options.weight_decay, grad_scale, t);
      // f32 arithmetic: a few units in the last place of each term.
      ASSERT_NEAR(param_after[i], r.param, 1e-6 * std::abs(static_cast<double>(param[i])) + 1e-5 * r.update)
          << "step " << t << " element " << i;
      ASSERT_NEAR(exp_avg_after[i], r.exp_avg, 1e-6 * r.avg_terms) << "step " << t << " element " << i;
      ASSERT_NEAR(exp_avg_sq_after[i], r.exp_avg_sq, 1e-6 * r.exp_avg_sq) << "step " << t << " element " << i;
    }
  }
  EXPECT_EQ(step_of(adamw, "0.weight"), 200);
  EXPECT_EQ(step_of(adamw, "0.bias"), 0) << "never given a gradient";
}

class AdamWCheckpoints : public testing::TempFolderTest {
 protected:
  static void train(Model& m, Optimizer& optimizer, float lr) {
    set_grad(m.weight, {0.5f, -1, 2});
    set_grad(m.bias, {0.25f});
    optimizer.step(lr);
  }
};

TEST_F(AdamWCheckpoints, StateRoundTripsAndTheFileNamesIt) {
  Model saved;
  AdamW saved_adamw(saved.sequential, *saved.backend, {.weight_decay = 0.1f});
  train(saved, saved_adamw, 0.01f);
  train(saved, saved_adamw, 0.02f);
  const fs::path path = dir_ / "adamw.safetensors";
  TrainingState state;
  state.epoch = 1;
  state.step = 2;
  save_checkpoint(path, saved.sequential, &saved_adamw, state);

  const SafetensorsFile file = read_safetensors(path);
  EXPECT_EQ(file.metadata.at("stoke.optimizer"), "adamw");
  std::vector<std::string> names;
  for (const TensorRecord& t : file.tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "0.late", "optimizer.exp_avg.0.weight",
                                             "optimizer.exp_avg.0.bias", "optimizer.exp_avg.0.late",
                                             "optimizer.exp_avg_sq.0.weight", "optimizer.exp_avg_sq.0.bias",
                                             "optimizer.exp_avg_sq.0.late", "optimizer.step.0.weight",
                                             "optimizer.step.0.bias", "optimizer.step.0.late"}));
  EXPECT_EQ(file.tensors[9].dtype, DType::i32);
  EXPECT_TRUE(file.tensors[9].shape.empty());
  EXPECT_FALSE(read_checkpoint_metadata(path).extra.contains("stoke.optimizer")) << "a reserved key";

  Model loaded({9, 9, 9}, {9}, {9, 9});
  AdamW loaded_adamw(loaded.sequential, *loaded.backend, {.weight_decay = 0.1f});
  EXPECT_EQ(load_checkpoint(path, loaded.sequential, &loaded_adamw).step, 2);
  EXPECT_EQ(step_of(loaded_adamw, "0.weight"), 2);
  EXPECT_EQ(step_of(loaded_adamw, "0.late"), 0);
  // The next step is the same on both: the moments and the step counts came back.
  train(saved, saved_adamw, 0.005f);
  train(loaded, loaded_adamw, 0.005f);
  EXPECT_EQ(loaded.weight.value.to_vector(), saved.weight.value.to_vector());
  EXPECT_EQ(loaded.bias.value.to_vector(), saved.bias.value.to_vector());
  for (const auto& [name, tensor] : states(saved_adamw)) {
    const std::map<std::string, Tensor> back = states(loaded_adamw);
    EXPECT_EQ(std::memcmp(back.at(name).data(), tensor.data(), tensor.bytes()), 0) << name;
  }
}

TEST_F(AdamWCheckpoints, StateOfAnotherOptimizerIsRefusedNamingBoth) {
  Model model;
  Sgd sgd(model.sequential, *model.backend);
  AdamW adamw(model.sequential, *model.backend);
  const fs::path sgd_path = dir_ / "sgd.safetensors";
  const fs::path adamw_path = dir_ / "adamw.safetensors";
  save_checkpoint(sgd_path, model.sequential, &sgd, {});
  save_checkpoint(adamw_path, model.sequential, &adamw, {});
  EXPECT_FALSE(read_safetensors(sgd_path).metadata.contains("stoke.optimizer")) << "Sgd's files are as they were";

  Model other({7, 7, 7}, {7}, {7, 7});
  AdamW other_adamw(other.sequential, *other.backend);
  Sgd other_sgd(other.sequential, *other.backend);
  const auto before = other.weight.value.to_vector();
  expect_throw_mentioning<std::runtime_error>(
      [&] { (void)load_checkpoint(sgd_path, other.sequential, &other_adamw); },
      "its optimizer state is sgd's, but the optimizer to load it into is adamw");
  expect_throw_mentioning<std::runtime_error>(
      [&] { (void)load_checkpoint(adamw_path, other.sequential, &other_sgd); },
      "its optimizer state is adamw's, but the optimizer to load it into is sgd");
  try {
    (void)load_checkpoint(adamw_path, other.sequential, &other_sgd);
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what()).find("missing"), std::string::npos)
        << "one mismatch, not a list: " << error.what();
  }
  EXPECT_EQ(other.weight.value.to_vector(), before) << "the model is left alone";
  // Without an optimizer, either file loads the weights.
  (void)load_checkpoint(adamw_path, other.sequential, nullptr);
  EXPECT_EQ(other.weight.value.to_vector(), model.weight.value.to_vector());
}

TEST(AdamW, RejectsBadOptionsAndArguments) {
  Model m;
  const auto options = [](float beta1, float beta2, float eps, float weight_decay) {
    return AdamWOptions{.beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay};
  };
  expect_throw_mentioning<std::invalid_argument>([&] { AdamW(m.sequential, *m.backend, options(1, 0.999f, 1e-8f, 0)); },
                                                 "AdamW: beta1 must be in [0, 1), not 1");
  expect_throw_mentioning<std::invalid_argument>(
      [&] { AdamW(m.sequential, *m.backend, options(0.9f, -0.5f, 1e-8f, 0)); }, "AdamW: beta2 must be in [0, 1)");
  expect_throw_mentioning<std::invalid_argument>([&] { AdamW(m.sequential, *m.backend, options(0.9f, 0.999f, -1, 0)); },
                                                 "AdamW: eps must be finite and >= 0");
  expect_throw_mentioning<std::invalid_argument>(
      [&] { AdamW(m.sequential, *m.backend, options(0.9f, 0.999f, 1e-8f, std::numeric_limits<float>::infinity())); },
      "AdamW: weight_decay must be finite and >= 0");
  AdamW adamw(m.sequential, *m.backend);
  expect_throw_mentioning<std::invalid_argument>([&] { adamw.step(-0.1f); }, "AdamW::step: the learning rate");
  expect_throw_mentioning<std::invalid_argument>([&] { adamw.step(0.1f, std::nanf("")); },
                                                 "AdamW::step: grad_scale must be finite");
  m.bias.value = Tensor({1}, DType::bf16);
  expect_throw_mentioning<std::invalid_argument>([&] { AdamW(m.sequential, *m.backend); },
                                                 "AdamW: parameter '0.bias' is bf16[1]");
  // The kernel itself refuses a step number below 1 and mismatched state.
  const Tensor p = Tensor::from_values({2}, {1, 2});
  expect_throw_mentioning<std::invalid_argument>(
      [&] { m.backend->adamw_update(p, Tensor::zeros({2}), Tensor::zeros({2}), Tensor::zeros({2}), {.step = 0}); },
      "step 0 is not a step number");
  expect_throw_mentioning<std::invalid_argument>(
      [&] { m.backend->adamw_update(p, Tensor::zeros({2}), Tensor::zeros({3}), Tensor::zeros({2}), {}); }, "exp_avg");
}

}  // namespace
}  // namespace stoke::nn
