// Learning: the small CNN, trained on the CPU backend on the generated shapes dataset (10 classes,
// 32 px, rendered in memory as `stoke gen-shapes` draws them; fresh images every epoch, so it
// cannot memorise them), reaches at least 90% validation accuracy. Then a checkpoint of the trained model, loaded into
// a fresh one, scores the same. The whole stack runs: every layer's forward and backward, the loss, SGD with momentum,
// the cosine schedule with warmup, evaluation in Mode::eval, and checkpoints.
#include <gtest/gtest.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <opencv2/core/mat.hpp>
#include <stoke/base/random.hpp>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/blas.hpp>
#include <stoke/nn/models.hpp>
#include <stoke/nn/trainer.hpp>
#include <stoke/nodes/shapes.hpp>
#include <vector>

namespace stoke::nn {
namespace {

constexpr int classes = 10;
constexpr int size = 32;
constexpr int batch = 64;

// A split rendered into one f32 NCHW tensor, normalised to about [-2, 2], and its labels.
struct Split {
  std::vector<float> pixels;  // count x 3 x size x size
  std::vector<std::int32_t> labels;
  std::size_t count = 0;
};

// Images first_index .. first_index + per_class * classes of `split`, per_class of each class.
Split render(nodes::ShapesSplit split, std::size_t per_class, std::uint64_t first_index = 0) {
  const std::vector<nodes::ShapeClass> shapes = nodes::shape_classes(classes);
  Split out;
  out.count = per_class * classes;
  constexpr std::size_t plane = size * size;
  out.pixels.resize(out.count * 3 * plane);
  out.labels.resize(out.count);
  tbb::parallel_for(std::size_t{0}, out.count, [&](std::size_t i) {
    base::ItemRng rng = nodes::shapes_rng(/*seed=*/3, split, first_index + i);
    const cv::Mat image = nodes::render_shape_image(shapes[i / per_class], size, rng);
    float* item = out.pixels.data() + i * 3 * plane;
    for (std::size_t p = 0; p < plane; ++p) {
      for (std::size_t c = 0; c < 3; ++c) item[c * plane + p] = (image.data[p * 3 + c] / 255.0f - 0.5f) / 0.25f;
    }
    out.labels[i] = static_cast<std::int32_t>(i / per_class);
  });
  return out;
}

// Items `order[first .. first + n)` of `split` as a batch; flipped horizontally when `flip` says.
void gather(const Split& split, const std::vector<std::size_t>& order, std::size_t first, std::size_t n,
            std::uint64_t epoch, bool augment, Tensor& images, Tensor& labels) {
  constexpr std::size_t item_floats = 3 * size * size;
  const auto dst = images.f32();
  for (std::size_t b = 0; b < n; ++b) {
    const std::size_t index = order[first + b];
    const float* src = split.pixels.data() + index * item_floats;
    float* out = dst.data() + b * item_floats;
    base::ItemRng rng(11, static_cast<std::uint32_t>(epoch), index);
    if (augment && rng.bernoulli(0.5)) {
      for (std::size_t row = 0; row < 3 * size; ++row) {
        for (std::size_t col = 0; col < size; ++col) out[row * size + col] = src[row * size + size - 1 - col];
      }
    } else {
      std::copy(src, src + item_floats, out);
    }
    labels.data_as<std::int32_t>()[b] = split.labels[index];
  }
}

double accuracy(Trainer& trainer, const Split& val) {
  std::vector<std::size_t> order(val.count);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::int64_t correct = 0;
  for (std::size_t first = 0; first < val.count; first += batch) {
    const std::size_t n = std::min<std::size_t>(batch, val.count - first);
    Tensor images({static_cast<std::int64_t>(n), 3, size, size});
    Tensor labels({static_cast<std::int64_t>(n)}, DType::i32);
    gather(val, order, first, n, 0, false, images, labels);
    correct += trainer.evaluate_batch(images, labels).read().correct;
  }
  return static_cast<double>(correct) / static_cast<double>(val.count);
}

TEST(Learning, SmallCnnLearnsShapesOnTheCpu) {
  const auto started = std::chrono::steady_clock::now();
  constexpr std::size_t train_per_class = 2000;
  const Split val = render(nodes::ShapesSplit::val, 100);
  const int epochs = 11;
  const auto steps_per_epoch = static_cast<std::int64_t>(train_per_class * classes / batch);

  auto backend = make_backend(Device::cpu());
  auto model = make_model("small_cnn", {.classes = classes, .seed = 5});
  Trainer trainer(*model, *backend,
                  {.sgd = {.momentum = 0.9f, .weight_decay = 5e-4f, .nesterov = true},
                   .schedule = {.kind = LrScheduleKind::cosine,
                                .base_lr = 0.05f,
                                .total_steps = steps_per_epoch * epochs,
                                .warmup_steps = steps_per_epoch * epochs / 12,
                                .warmup_start = 0.04f},
                   .label_smoothing = 0.05f,
                   .seed = 5});

  std::vector<std::size_t> order(train_per_class * classes);
  std::iota(order.begin(), order.end(), std::size_t{0});
  Tensor images({batch, 3, size, size});
  Tensor labels({batch}, DType::i32);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    const Split train =
        render(nodes::ShapesSplit::train, train_per_class, static_cast<std::uint64_t>(epoch) * order.size());
    base::ItemRng shuffle(17, static_cast<std::uint32_t>(epoch), 0);
    for (std::size_t i = order.size() - 1; i > 0; --i) {
      std::swap(order[i], order[static_cast<std::size_t>(shuffle.uniform_int(0, static_cast<std::int64_t>(i)))]);
    }
    double loss = 0;
    for (std::int64_t s = 0; s < steps_per_epoch; ++s) {
      gather(train, order, static_cast<std::size_t>(s) * batch, batch, static_cast<std::uint64_t>(epoch), true, images,
             labels);
      loss += trainer.train_batch(images, labels).read().loss;
    }
    trainer.set_epoch(epoch + 1);
    std::printf("epoch %d: train loss %.3f, val accuracy %.3f (%.0f s)\n", epoch + 1,
                loss / static_cast<double>(steps_per_epoch), accuracy(trainer, val),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  const double trained = accuracy(trainer, val);
  EXPECT_GE(trained, 0.90) << "validation accuracy after " << epochs << " epochs";

  // A checkpoint of the trained model, loaded into a differently initialised one, scores the same.
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) / "learning_test.safetensors";
  trainer.save(path);
  auto other = make_model("small_cnn", {.classes = classes, .seed = 99});
  Trainer restored(*other, *backend, {.schedule = {.kind = LrScheduleKind::constant}});
  EXPECT_LT(accuracy(restored, val), 0.5);
  restored.load(path);
  EXPECT_EQ(restored.step(), trainer.step());
  EXPECT_EQ(restored.epoch(), epochs);
  EXPECT_DOUBLE_EQ(accuracy(restored, val), trained);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace stoke::nn

// The test's own main: OpenBLAS may need to load again with its AVX-512 kernels (blas.hpp), which
// makes the minutes of training here about half as many on such CPUs.
int main(int argc, char** argv) {
  stoke::nn::use_fastest_blas_kernels(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
