// Batch norm with its ReLU fused (BatchNorm2dOptions::relu) and a residual block joined in its last
// batch norm (Residual::joined), on the CPU: the same numbers, bit for bit, as the separate
// BatchNorm2d, add and ReLU layers, forward and backward, in training and eval; ResNet and the
// small CNN built fused train to the same parameters and checkpoint bytes as built unfused; the
// misuses are named. (cuda_backend_gpu_test.cpp checks CUDA's one-pass kernels against these.)
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <stoke/nn/activation.hpp>
#include <stoke/nn/batch_norm.hpp>
#include <stoke/nn/checkpoint.hpp>
#include <stoke/nn/models.hpp>
#include <stoke/nn/trainer.hpp>
#include <string>
#include <utility>
#include <vector>

#include "../gpu/expect_throw.hpp"
#include "gradcheck.hpp"
#include "temp_folder.hpp"

namespace stoke::nn {
namespace {

using testing::CpuFixture;
using testing::random_tensor;

std::vector<float> values(const Tensor& t) { return t.to_vector(); }

void expect_same(const Tensor& expected, const Tensor& actual, const std::string& what) {
  ASSERT_EQ(expected.shape(), actual.shape()) << what;
  EXPECT_EQ(values(expected), values(actual)) << what << " differs from the separate layers'";
}

// Gamma and beta away from 1 and 0, so that the ReLU cuts a good share of the values.
void set_affine(BatchNorm2d& bn) {
  const std::int64_t c = bn.gamma().value.numel();
  bn.gamma().value.copy_from(random_tensor({c}, 41, 0.5, 1.5));
  bn.beta().value.copy_from(random_tensor({c}, 42, -0.5, 0.5));
}

TEST(FusedBatchNorm, ReluMatchesTheSeparateLayersInTrainingAndEval) {
  const Shape shape{3, 4, 5, 6};
  const Tensor x = random_tensor(shape, 1, -2, 2);
  const Tensor dy = random_tensor(shape, 2);
  CpuFixture f;
  BatchNorm2d fused({.channels = 4, .relu = true});
  BatchNorm2d plain({.channels = 4});
  ReLU relu;
  set_affine(fused);
  set_affine(plain);

  const Tensor y_fused = fused.forward(x, f.ctx);
  const Tensor y_plain = relu.forward(plain.forward(x, f.ctx), f.ctx);
  expect_same(y_plain, y_fused, "y");
  const Tensor dx_fused = fused.backward(dy, f.ctx);
  const Tensor dx_plain = plain.backward(relu.backward(dy, f.ctx), f.ctx);
  expect_same(dx_plain, dx_fused, "dx");
  expect_same(plain.gamma().grad, fused.gamma().grad, "dgamma");
  expect_same(plain.beta().grad, fused.beta().grad, "dbeta");
  expect_same(plain.running_mean(), fused.running_mean(), "running_mean");
  expect_same(plain.running_var(), fused.running_var(), "running_var");

  Context eval{.backend = f.ctx.backend, .mode = Mode::eval};
  expect_same(relu.forward(plain.forward(x, eval), eval), fused.forward(x, eval), "y (eval)");
  EXPECT_EQ(fused.describe(), "BatchNorm2d(4, eps=1e-05, momentum=0.1, relu=True)");
}

TEST(FusedBatchNorm, TheResidualJoinMatchesBatchNormAddRelu) {
  const Shape shape{2, 3, 4, 5};
  const Tensor x = random_tensor(shape, 3, -2, 2);
  const Tensor residual = random_tensor(shape, 4);
  const Tensor dy = random_tensor(shape, 5);
  CpuFixture f;
  BatchNorm2d fused({.channels = 3, .relu = true});
  BatchNorm2d plain({.channels = 3});
  set_affine(fused);
  set_affine(plain);

  const Tensor y_fused = fused.forward(x, residual, f.ctx);
  const Tensor sum = f.backend->empty(shape);
  f.backend->add(plain.forward(x, f.ctx), residual, sum);
  const Tensor y_plain = f.backend->empty(shape);
  f.backend->relu_forward(sum, y_plain);
  expect_same(y_plain, y_fused, "y");

  Tensor dresidual;
  const Tensor dx_fused = fused.backward(dy, f.ctx, dresidual);
  const Tensor dz = f.backend->empty(shape);
  f.backend->relu_backward(y_plain, dy, dz);
  const Tensor dx_plain = plain.backward(dz, f.ctx);
  expect_same(dz, dresidual, "the residual's gradient");
  expect_same(dx_plain, dx_fused, "dx");
  expect_same(plain.gamma().grad, fused.gamma().grad, "dgamma");
  expect_same(plain.beta().grad, fused.beta().grad, "dbeta");
}

TEST(FusedBatchNorm, MisusesAreNamed) {
  const Tensor x = random_tensor({2, 3, 2, 2}, 6);
  CpuFixture f;
  BatchNorm2d without_relu({.channels = 3});
  gpu::test::expect_throw_mentioning<std::invalid_argument>([&] { (void)without_relu.forward(x, x, f.ctx); },
                                                            "BatchNorm2d(3, eps=1e-05, momentum=0.1): a residual join "
                                                            "needs the fused ReLU (BatchNorm2dOptions::relu)");

  BatchNorm2d bn({.channels = 3, .relu = true});
  gpu::test::expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)bn.forward(x, random_tensor({2, 3, 2, 1}, 7), f.ctx);
      },
      "does not match the input");
  (void)bn.forward(x, x, f.ctx);
  // The residual's gradient must be taken: a one-operand backward would drop it.
  gpu::test::expect_throw_mentioning<std::logic_error>([&] { (void)bn.backward(x, f.ctx); },
                                                       "the forward had a residual");
  (void)bn.forward(x, f.ctx);
  Tensor dresidual;
  gpu::test::expect_throw_mentioning<std::logic_error>([&] { (void)bn.backward(x, f.ctx, dresidual); },
                                                       "without a residual");

  auto body = std::make_unique<Sequential>();
  body->emplace<BatchNorm2d>("bn", BatchNorm2dOptions{.channels = 3});
  gpu::test::expect_throw_mentioning<std::invalid_argument>([&] { (void)Residual::joined(std::move(body)); },
                                                            "Residual::joined: the body must end in a BatchNorm2d");
}

// A few SGD steps of `name` built fused or not, from one seed: the losses, the logits after them,
// the checkpoint's bytes and the state's names.
struct Trained {
  std::vector<double> losses;
  std::vector<float> logits;  // eval mode, after the steps
  std::string checkpoint;
  std::vector<std::string> names;
};

Trained train_a_few_steps(const std::string& name, bool fuse, const std::filesystem::path& folder) {
  const std::unique_ptr<Backend> backend = make_backend(Device::cpu());
  auto model = make_model(name, {.classes = 5, .seed = 11, .fuse = fuse});
  Trainer trainer(*model, *backend, {.schedule = {.kind = LrScheduleKind::constant, .base_lr = 0.05f}});
  const Tensor images = random_tensor({4, 3, 32, 32}, 12);
  Tensor labels({4}, DType::i32);
  for (std::int32_t i = 0; i < 4; ++i) labels.data_as<std::int32_t>()[i] = i;
  Trained out;
  for (int step = 0; step < 3; ++step) out.losses.push_back(trainer.train_batch(images, labels).read().loss);
  out.logits = trainer.predict(images).to_vector();
  const std::filesystem::path path = folder / (name + (fuse ? "_fused" : "_plain") + ".safetensors");
  trainer.save(path);
  out.checkpoint = testing::file_bytes(path);
  model->for_each_parameter([&](const std::string& n, Parameter&) { out.names.push_back(n); });
  model->for_each_buffer([&](const std::string& n, Tensor&) { out.names.push_back(n); });
  return out;
}

class FusedModels : public testing::TempFolderTest {};

TEST_F(FusedModels, TrainToTheSameCheckpointBytesAsUnfused) {
  for (const std::string name : {"resnet18", "small_cnn"}) {
    SCOPED_TRACE(name);
    const Trained fused = train_a_few_steps(name, true, dir_);
    const Trained plain = train_a_few_steps(name, false, dir_);
    EXPECT_EQ(plain.names, fused.names);
    EXPECT_EQ(plain.losses, fused.losses);
    EXPECT_EQ(plain.logits, fused.logits);
    EXPECT_TRUE(plain.checkpoint == fused.checkpoint) << "the checkpoints differ";
    EXPECT_GT(plain.checkpoint.size(), 1000u);
  }
}

}  // namespace
}  // namespace stoke::nn
