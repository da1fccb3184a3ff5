// Mixed precision and channels-last above the kernels: the layers' weight casts and f32 gradient
// accumulation, Layer::to_layout, and the Trainer's bf16 steps and f16 dynamic loss scaling. The
// kernels run on EmulatedBackend (half-precision storage, f32 arithmetic, NHWC; on the CPU), and
// the results are compared with the f32 NCHW CpuBackend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <stoke/nn/conv2d.hpp>
#include <stoke/nn/dropout.hpp>
#include <stoke/nn/linear.hpp>
#include <stoke/nn/models.hpp>
#include <stoke/nn/optimizer.hpp>
#include <stoke/nn/trainer.hpp>
#include <string>
#include <vector>

#include "../gpu/expect_throw.hpp"
#include "compare.hpp"
#include "emulated_backend.hpp"
#include "gradcheck.hpp"
#include "temp_folder.hpp"

namespace stoke::nn {
namespace {

namespace fs = std::filesystem;
using gpu::test::expect_throw_mentioning;
using testing::EmulatedBackend;
using testing::expect_same_steps;
using testing::random_tensor;
using testing::relative_error;

// x converted to `dtype` (and `layout` for a 4-d x) on the host.
Tensor as(const Tensor& x, DType dtype, TensorLayout layout = TensorLayout::nchw) {
  const Tensor arranged = x.rank() == 4 ? to_layout(x, layout) : x;
  Tensor out(x.shape(), dtype, Device::cpu(), arranged.layout());
  make_backend(Device::cpu())->cast(arranged, out);
  return out;
}

// The elements of x as f32 in NCHW order, whatever its dtype and layout.
std::vector<float> planar_values(const Tensor& x) {
  Tensor wide(x.shape(), DType::f32, Device::cpu(), x.layout());
  make_backend(Device::cpu())->cast(x, wide);
  const Tensor planar = x.rank() == 4 ? to_layout(wide, TensorLayout::nchw) : wide;
  return planar.to_vector();
}

double max_abs(const std::vector<float>& values) {
  double m = 0;
  for (const float v : values) m = std::max(m, static_cast<double>(std::abs(v)));
  return m;
}

// One layer's outputs: the rounding of inputs, weights and results to bf16 (8 significant bits)
// or f16 (11) leaves a relative error of a few units of the last place.
void expect_close(const std::vector<float>& actual, const std::vector<float>& expected, double bound,
                  const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  EXPECT_LE(relative_error(actual, expected), bound) << what;
}

Tensor labels_for(std::int64_t n, int classes) {
  Tensor labels({n}, DType::i32);
  for (std::int64_t i = 0; i < n; ++i) labels.data_as<std::int32_t>()[i] = static_cast<std::int32_t>(i * 7 % classes);
  return labels;
}

// ---- layers

TEST(MixedPrecisionLayers, ToLayoutRearrangesConvolutionWeightsAndBack) {
  auto model = make_model("small_cnn", {.classes = 10, .seed = 3, .width = 4});
  const auto before = testing::parameter_values(*model);
  std::map<std::string, Tensor> originals;
  model->for_each_parameter([&](const std::string& name, Parameter& p) { originals[name] = p.value; });

  model->to_layout(TensorLayout::nhwc);
  int rearranged = 0;
  model->for_each_parameter([&](const std::string& name, Parameter& p) {
    if (p.value.rank() != 4) {
      EXPECT_EQ(p.value.data(), originals[name].data()) << name << ": only 4-d parameters move";
      return;
    }
    ++rearranged;
    EXPECT_EQ(p.value.layout(), TensorLayout::nhwc) << name;
    EXPECT_EQ(p.value.shape(), originals[name].shape()) << name;
  });
  EXPECT_EQ(rearranged, 4);  // small_cnn's four convolutions
  EXPECT_EQ(testing::parameter_values(*model), before) << "the same values at the same logical indices";

  model->to_layout(TensorLayout::nchw);
  model->for_each_parameter([&](const std::string& name, Parameter& p) {
    EXPECT_EQ(p.value.layout(), TensorLayout::nchw) << name;
    EXPECT_EQ(p.value.to_vector(), originals[name].to_vector()) << name;
  });
}

TEST(MixedPrecisionLayers, Bf16ConvolutionMatchesF32AndKeepsF32Gradients) {
  EmulatedBackend emulated;
  const std::unique_ptr<Backend> cpu = make_backend(Device::cpu());
  const Conv2dOptions options{.in_channels = 6, .out_channels = 8, .kernel = 3, .padding = 1, .bias = true, .seed = 4};
  Conv2d half(options);
  Conv2d full(options);
  half.to_layout(TensorLayout::nhwc);

  const Tensor x = random_tensor({2, 6, 7, 7}, 11);
  Context half_ctx{.backend = emulated, .mode = Mode::train, .seed = 1, .step = 0};
  Context full_ctx{.backend = *cpu, .mode = Mode::train, .seed = 1, .step = 0};
  const Tensor y_half = half.forward(as(x, DType::bf16, TensorLayout::nhwc), half_ctx);
  const Tensor y_full = full.forward(x, full_ctx);
  EXPECT_EQ(y_half.dtype(), DType::bf16);
  EXPECT_EQ(y_half.layout(), TensorLayout::nhwc);
  expect_close(planar_values(y_half), y_full.to_vector(), 5e-3, "y");

  // Two backward passes with different gradients: the f32 gradients sum both, as gradient
  // accumulation needs.
  for (int pass = 0; pass < 2; ++pass) {
    const Tensor dy = random_tensor({2, 8, 7, 7}, 12 + static_cast<std::uint64_t>(pass));
    const Tensor dx_half = half.backward(as(dy, DType::bf16, TensorLayout::nhwc), half_ctx);
    const Tensor dx_full = full.backward(dy, full_ctx);
    EXPECT_EQ(dx_half.dtype(), DType::bf16);
    expect_close(planar_values(dx_half), dx_full.to_vector(), 5e-3, "dx");
    if (pass == 0) {
      (void)half.forward(as(x, DType::bf16, TensorLayout::nhwc), half_ctx);
      (void)full.forward(x, full_ctx);
    }
  }
  EXPECT_EQ(half.weight().value.dtype(), DType::f32) << "the master weights stay f32";
  EXPECT_EQ(half.weight().grad.dtype(), DType::f32);
  EXPECT_EQ(half.weight().grad.layout(), TensorLayout::nhwc);
  EXPECT_EQ(half.bias()->grad.dtype(), DType::f32);
  expect_close(planar_values(half.weight().grad), full.weight().grad.to_vector(), 5e-3, "dw");
  expect_close(half.bias()->grad.to_vector(), full.bias()->grad.to_vector(), 5e-3, "db");
  EXPECT_GT(emulated.converted_calls(), 0);
}

TEST(MixedPrecisionLayers, F16LinearMatchesF32) {
  EmulatedBackend emulated;
  const std::unique_ptr<Backend> cpu = make_backend(Device::cpu());
  Linear half({.in_features = 20, .out_features = 5, .bias = true, .seed = 2});
  Linear full({.in_features = 20, .out_features = 5, .bias = true, .seed = 2});
  const Tensor x = random_tensor({3, 20}, 21);
  const Tensor dy = random_tensor({3, 5}, 22);
  Context half_ctx{.backend = emulated, .mode = Mode::train, .seed = 1, .step = 0};
  Context full_ctx{.backend = *cpu, .mode = Mode::train, .seed = 1, .step = 0};
  const Tensor y_half = half.forward(as(x, DType::f16), half_ctx);
  expect_close(planar_values(y_half), full.forward(x, full_ctx).to_vector(), 1e-3, "y");
  const Tensor dx_half = half.backward(as(dy, DType::f16), half_ctx);
  expect_close(planar_values(dx_half), full.backward(dy, full_ctx).to_vector(), 1e-3, "dx");
  expect_close(half.weight().grad.to_vector(), full.weight().grad.to_vector(), 1e-3, "dw");
  expect_close(half.bias()->grad.to_vector(), full.bias()->grad.to_vector(), 1e-3, "db");
}

TEST(MixedPrecisionLayers, ConvolutionRefusesAnInputLaidOutUnlikeItsWeights) {
  EmulatedBackend emulated;
  Conv2d conv({.in_channels = 3, .out_channels = 4, .kernel = 3, .seed = 1});
  Context ctx{.backend = emulated, .mode = Mode::train, .seed = 1, .step = 0};
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)conv.forward(as(random_tensor({1, 3, 5, 5}, 1), DType::bf16, TensorLayout::nhwc), ctx);
      },
      "model.to_layout(TensorLayout::nhwc)");
}

TEST(MixedPrecisionLayers, FlattenTakesChannelsLastOnlyWhenEachChannelHoldsOneValue) {
  EmulatedBackend emulated;
  Context ctx{.backend = emulated, .mode = Mode::train, .seed = 1, .step = 0};
  Flatten flatten;
  const Tensor pooled = as(random_tensor({2, 6, 1, 1}, 3), DType::f32, TensorLayout::nhwc);
  EXPECT_EQ(flatten.forward(pooled, ctx).shape(), (Shape{2, 6}));
  // The gradient goes back channels-last, as the layer below it produced its output.
  const Tensor dx = flatten.backward(random_tensor({2, 6}, 4), ctx);
  EXPECT_EQ(dx.shape(), (Shape{2, 6, 1, 1}));
  EXPECT_EQ(dx.layout(), TensorLayout::nhwc);
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)flatten.forward(as(random_tensor({2, 6, 2, 2}, 3), DType::f32, TensorLayout::nhwc), ctx);
      },
      "channels-last");
}

TEST(MixedPrecisionLayers, AllFiniteInChecksEveryTensor) {
  const std::unique_ptr<Backend> cpu = make_backend(Device::cpu());
  const Tensor a = random_tensor({5}, 1);
  Tensor b = random_tensor({3, 4}, 2);
  const std::vector<Tensor> both{a, b};
  EXPECT_TRUE(cpu->all_finite_in(both));
  b.f32()[7] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(cpu->all_finite_in(both));
  EXPECT_TRUE(cpu->all_finite_in({}));
}

// ---- the Trainer

class MixedPrecisionTrainer : public testing::TempFolderTest {
 protected:
  static constexpr std::int64_t kBatch = 16;
  static constexpr int kClasses = 10;

  static std::unique_ptr<Sequential> model() {
    return make_model("small_cnn", {.classes = kClasses, .seed = 8, .width = 8});
  }
  static TrainerOptions options(DType compute) {
    return {.sgd = {.momentum = 0.9f, .weight_decay = 5e-4f},
            .schedule = {.kind = LrScheduleKind::constant, .base_lr = 0.05f},
            .label_smoothing = 0.1f,
            .accumulation = 1,
            .seed = 3,
            .compute = compute,
            .loss_scale = {}};
  }

  const Tensor images_ = random_tensor({kBatch, 3, 32, 32}, 77);
  const Tensor labels_ = labels_for(kBatch, kClasses);
};

TEST_F(MixedPrecisionTrainer, Bf16ChannelsLastStepsFollowTheF32Steps) {
  const std::unique_ptr<Backend> cpu = make_backend(Device::cpu());
  EmulatedBackend emulated;
  auto full_model = model();
  auto half_model = model();
  half_model->to_layout(TensorLayout::nhwc);
  Trainer full(*full_model, *cpu, options(DType::f32));
  Trainer half(*half_model, emulated, options(DType::bf16));
  const Tensor nhwc_images = to_layout(images_, TensorLayout::nhwc);  // f32: the Trainer casts to bf16
  const auto start = testing::parameter_values(*full_model);
  for (int step = 0; step < 3; ++step) {
    const LossStats f = full.train_batch(images_, labels_).read();
    const LossStats h = half.train_batch(nhwc_images, labels_).read();
    EXPECT_NEAR(h.loss, f.loss, 2e-2 * f.loss) << "step " << step;
  }
  EXPECT_EQ(half.loss_scale(), 1.0f) << "bf16 has f32's range: no loss scaling";
  const auto half_values = testing::parameter_values(*half_model);
  expect_same_steps(half_values, testing::parameter_values(*full_model), start, 0.3);

  // The checkpoint of the channels-last run is in PyTorch's NCHW order: an f32 NCHW trainer
  // resumes from it with the same weights and momentum.
  half.save(dir_ / "bf16.safetensors");
  auto resumed_model = make_model("small_cnn", {.classes = kClasses, .seed = 99, .width = 8});
  Trainer resumed(*resumed_model, *cpu, options(DType::f32));
  resumed.load(dir_ / "bf16.safetensors");
  EXPECT_EQ(resumed.step(), 3);
  EXPECT_EQ(testing::parameter_values(*resumed_model), half_values);
  std::map<std::string, std::vector<float>> half_momentum;
  half.optimizer().for_each_state([&](const std::string& n, Tensor& t) { half_momentum[n] = planar_values(t); });
  resumed.optimizer().for_each_state(
      [&](const std::string& n, Tensor& t) { EXPECT_EQ(t.to_vector(), half_momentum.at(n)) << n; });
}

TEST_F(MixedPrecisionTrainer, F16StepUndoesTheLossScale) {
  const std::unique_ptr<Backend> cpu = make_backend(Device::cpu());
  EmulatedBackend emulated;
  auto full_model = model();
  auto half_model = model();
  TrainerOptions f16 = options(DType::f16);
  f16.loss_scale = {.initial = 1024.0f, .growth_interval = 2, .growth = 2.0f, .backoff = 0.5f};
  Trainer full(*full_model, *cpu, options(DType::f32));
  Trainer half(*half_model, emulated, f16);
  EXPECT_EQ(half.loss_scale(), 1024.0f);
  const auto start = testing::parameter_values(*full_model);
  (void)full.train_batch(images_, labels_);
  const LossStats h = half.train_batch(images_, labels_).read();
  EXPECT_TRUE(std::isfinite(h.loss));
  EXPECT_EQ(half.skipped_steps(), 0);
  EXPECT_EQ(half.loss_scale(), 1024.0f);
  expect_same_steps(testing::parameter_values(*half_model), testing::parameter_values(*full_model), start, 0.15);

  (void)half.train_batch(images_, labels_);
  EXPECT_EQ(half.loss_scale(), 2048.0f) << "two good steps in a row (growth_interval 2) double the scale";
  EXPECT_EQ(half.skipped_steps(), 0);

  // The scale is training state: a resumed f16 run continues with it.
  half.save(dir_ / "f16.safetensors");
  auto resumed_model = model();
  Trainer resumed(*resumed_model, emulated, f16);
  resumed.load(dir_ / "f16.safetensors");
  EXPECT_EQ(resumed.loss_scale(), 2048.0f);
  EXPECT_EQ(resumed.step(), 2);
}

TEST_F(MixedPrecisionTrainer, F16OverflowSkipsTheStepAndLowersTheScale) {
  EmulatedBackend emulated;
  auto half_model = model();
  TrainerOptions f16 = options(DType::f16);
  // 2^40 times a loss gradient of order 1/N is far beyond f16's largest value (65504).
  f16.loss_scale.initial = 1099511627776.0f;
  Trainer half(*half_model, emulated, f16);
  const auto before = testing::parameter_values(*half_model);

  (void)half.train_batch(images_, labels_);
  EXPECT_EQ(half.skipped_steps(), 1);
  EXPECT_EQ(half.loss_scale(), 549755813888.0f) << "halved (backoff 0.5)";
  EXPECT_EQ(half.step(), 1) << "a skipped step still counts for the schedule";
  EXPECT_EQ(testing::parameter_values(*half_model), before) << "a skipped step changes no weight";
  half.optimizer().for_each_state([&](const std::string& name, Tensor& momentum) {
    EXPECT_EQ(max_abs(momentum.to_vector()), 0.0) << name << ": nor any momentum";
  });
  half_model->for_each_parameter([&](const std::string& name, Parameter& p) {
    if (p.grad.defined()) {
      EXPECT_EQ(max_abs(p.grad.to_vector()), 0.0) << name << ": the bad gradients are dropped";
    }
  });

  // The scale keeps halving until the gradients fit; then the steps go through.
  int steps = 1;
  while (half.skipped_steps() == steps && steps < 40) {
    (void)half.train_batch(images_, labels_);
    ++steps;
  }
  EXPECT_LT(half.skipped_steps(), steps) << "a step went through at scale " << half.loss_scale();
  EXPECT_EQ(half.loss_scale(), std::ldexp(1.0f, 40 - static_cast<int>(half.skipped_steps())));
  EXPECT_NE(testing::parameter_values(*half_model), before);
}

// Counts the Trainer's overflow checks: those that wait for the stream (all_finite_in called
// directly) and those enqueued on the device's loss scale state (find_non_finite).
class CountingBackend : public EmulatedBackend {
 public:
  int waits = 0;
  int device_checks = 0;
  int scale_updates = 0;

  bool all_finite_in(std::span<const Tensor> xs) override {
    if (!inside_device_check_) ++waits;
    return EmulatedBackend::all_finite_in(xs);
  }
  void find_non_finite(std::span<const Tensor> xs, const Tensor& state) override {
    ++device_checks;
    inside_device_check_ = true;  // the base's host emulation of the device check
    EmulatedBackend::find_non_finite(xs, state);
    inside_device_check_ = false;
  }
  void update_loss_scale(const Tensor& state, float growth, float backoff, int growth_interval) override {
    ++scale_updates;
    EmulatedBackend::update_loss_scale(state, growth, backoff, growth_interval);
  }

 private:
  bool inside_device_check_ = false;
};

TEST_F(MixedPrecisionTrainer, F16WithSgdKeepsTheScaleOnTheDeviceAndWithAdamWChecksOnTheHost) {
  for (const bool adamw : {false, true}) {
    SCOPED_TRACE(adamw ? "AdamW" : "Sgd");
    CountingBackend counting;
    auto half_model = model();
    TrainerOptions f16 = options(DType::f16);
    f16.loss_scale.initial = 1024.0f;  // inside the range for these batches
    if (adamw) f16.optimizer = AdamW::factory({});
    Trainer half(*half_model, counting, f16);
    constexpr int kSteps = 3;
    for (int i = 0; i < kSteps; ++i) (void)half.train_batch(images_, labels_);
    EXPECT_EQ(counting.waits, adamw ? kSteps : 0) << "overflow checks that wait for the stream";
    EXPECT_EQ(counting.device_checks, adamw ? 0 : kSteps);
    EXPECT_EQ(counting.scale_updates, adamw ? 0 : kSteps);
    EXPECT_EQ(half.skipped_steps(), 0);
    EXPECT_EQ(half.loss_scale(), 1024.0f);
  }
}

TEST_F(MixedPrecisionTrainer, CpuBackendRefusesMixedPrecisionNamingTheFix) {
  const std::unique_ptr<Backend> cpu = make_backend(Device::cpu());
  auto m = model();
  Trainer bf16(*m, *cpu, options(DType::bf16));
  expect_throw_mentioning<std::invalid_argument>([&] { (void)bf16.train_batch(images_, labels_); },
                                                 "needs a CUDA device");
  // Channels-last images need a channels-last model (the CPU computes them; see below).
  Trainer f32(*m, *cpu, options(DType::f32));
  expect_throw_mentioning<std::invalid_argument>(
      [&] { (void)f32.train_batch(to_layout(images_, TensorLayout::nhwc), labels_); }, "to_layout");
  expect_throw_mentioning<std::invalid_argument>([&] { Trainer bad(*m, *cpu, options(DType::u8)); },
                                                 "f32, bf16 or f16");
  EXPECT_TRUE(cpu->supports(DType::f32, TensorLayout::nhwc));
  EXPECT_EQ(cpu->preferred_layout(DType::f32), TensorLayout::nchw);
}

// The CpuBackend computes channels-last calls on NCHW copies: a model trained channels-last makes
// the same steps as one trained NCHW, bit for bit, and saves the same checkpoint bytes (PyTorch's
// order). Every kind of layer the catalog uses: convolutions (grouped too), batch norm, pooling,
// residual adds.
TEST_F(MixedPrecisionTrainer, CpuChannelsLastTrainsBitForBitAsNchw) {
  const std::unique_ptr<Backend> cpu = make_backend(Device::cpu());
  const Tensor nhwc_images = to_layout(images_, TensorLayout::nhwc);
  for (const std::string name : {"small_cnn", "mobilenet", "resnet18"}) {
    SCOPED_TRACE(name);
    auto planar = make_model(name, {.classes = kClasses, .seed = 8, .width = 8});
    auto interleaved = make_model(name, {.classes = kClasses, .seed = 8, .width = 8});
    interleaved->to_layout(TensorLayout::nhwc);
    EXPECT_EQ(interleaved->layout(), TensorLayout::nhwc);
    EXPECT_EQ(planar->layout(), TensorLayout::nchw);
    Trainer a(*planar, *cpu, options(DType::f32));
    Trainer b(*interleaved, *cpu, options(DType::f32));
    for (int step = 0; step < 2; ++step) {
      const LossStats la = a.train_batch(images_, labels_).read();
      const LossStats lb = b.train_batch(nhwc_images, labels_).read();
      EXPECT_EQ(la.loss, lb.loss) << "step " << step;
    }
    a.save(dir_ / "nchw.safetensors");
    b.save(dir_ / "nhwc.safetensors");
    EXPECT_EQ(testing::file_bytes(dir_ / "nchw.safetensors"), testing::file_bytes(dir_ / "nhwc.safetensors"));
    EXPECT_EQ(a.predict(images_).to_vector(), b.predict(nhwc_images).to_vector());
  }
}

}  // namespace
}  // namespace stoke::nn
