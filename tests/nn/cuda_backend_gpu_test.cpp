// CudaBackend against CpuBackend: every kernel on the same random inputs, in f32 (tight
// tolerances), bf16 and f16 (the inputs rounded to the type first, so both backends see the same
// values; tolerances of the type's precision), in NCHW and NHWC; then two training steps of each
// model on both backends from the same seed, in f32 and in bf16 / f16 channels-last (mixed
// precision against the f32 reference); a second backend taking the first's algorithm choices
// from the file they share. Skips without a CUDA device.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "compare.hpp"
#include "emulated_backend.hpp"
#include "loss_scaler_checks.hpp"
#include "scoped_environment.hpp"
#include "stoke/gpu/device.hpp"
#include "stoke/gpu/dtype.hpp"
#include "stoke/gpu/stream.hpp"
#include "stoke/base/random.hpp"
#include "stoke/nn/backend.hpp"
#include "stoke/nn/layer.hpp"
#include "stoke/nn/loss.hpp"
#include "stoke/nn/models.hpp"
#include "stoke/nn/optimizer.hpp"
#include "stoke/nn/tensor.hpp"
#include "stoke/nn/trainer.hpp"

namespace stoke::nn {
namespace {

namespace fs = std::filesystem;
using testing::expect_same_steps;
using testing::parameter_values;
using testing::relative_error;
using testing::ParameterValues;

// A host f32 tensor of values uniform in [lo, hi), a function of `seed`.
Tensor random_tensor(const Shape& shape, std::uint64_t seed, double lo = -1, double hi = 1) {
  Tensor t(shape);
  base::ItemRng rng(seed, 0, 0);
  for (float& v : t.f32()) v = static_cast<float>(rng.uniform(lo, hi));
  return t;
}

// The nearest value of `dtype` to each element, as floats (identity for f32).
Tensor rounded(const Tensor& host, DType dtype) {
  Tensor out(host.shape(), DType::f32, Device::cpu(), host.layout());
  const auto in = host.f32();
  const auto values = out.f32();
  for (std::size_t i = 0; i < in.size(); ++i) {
    values[i] = dtype == DType::bf16  ? float_from_bf16(bf16_from_float(in[i]))
                : dtype == DType::f16 ? float_from_f16(f16_from_float(in[i]))
                                      : in[i];
  }
  return out;
}

// Tolerances: |gpu - cpu| <= atol * max|cpu| + rtol * |cpu|.
struct Tolerance {
  double rtol;
  double atol;
};
Tolerance tolerance_of(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return {2e-2, 2e-2};
    case DType::f16:
      return {4e-3, 4e-3};
    default:
      return {1e-4, 2e-5};
  }
}

void expect_close(const Tensor& expected, const Tensor& actual, Tolerance tol, const std::string& what) {
  ASSERT_EQ(expected.shape(), actual.shape()) << what;
  const std::vector<float> e = expected.to_vector();
  const std::vector<float> a = actual.to_vector();
  double scale = 0;
  for (const float v : e) scale = std::max(scale, static_cast<double>(std::abs(v)));
  int failures = 0;
  for (std::size_t i = 0; i < e.size() && failures < 5; ++i) {
    const double bound = tol.atol * scale + tol.rtol * std::abs(static_cast<double>(e[i]));
    if (!(std::abs(static_cast<double>(a[i]) - static_cast<double>(e[i])) <= bound)) {
      ADD_FAILURE() << what << " element " << i << " of " << e.size() << ": gpu " << a[i] << ", cpu " << e[i]
                    << " (bound " << bound << ")";
      ++failures;
    }
  }
}

// A CUDA backend on a stream of device 0 and the CPU reference; skips without a device.
class GpuAndCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << gpu::cuda_unavailable_reason();
    stream_ = std::make_unique<Stream>(Device::cuda(0));
    gpu_ = make_backend(Device::cuda(0), *stream_);
    cpu_ = make_backend(Device::cpu());
  }

  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Backend> gpu_;
  std::unique_ptr<Backend> cpu_;
};

class CudaBackendTest : public GpuAndCpu, public ::testing::WithParamInterface<std::tuple<DType, TensorLayout>> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  TensorLayout layout() const { return std::get<1>(GetParam()); }
  Tolerance tol() const { return tolerance_of(dtype()); }

  // A host f32 NCHW tensor on the device as `dtype`, images in `layout`.
  Tensor up(const Tensor& host, DType as) const {
    const Tensor arranged = host.rank() == 4 ? to_layout(host, layout()) : host;
    const Tensor f32 = arranged.to(Device::cuda(0), *stream_);
    if (as == DType::f32) return f32;
    Tensor t = gpu_->empty(host.shape(), as, f32.layout());
    gpu_->cast(f32, t);
    return t;
  }
  Tensor up(const Tensor& host) const { return up(host, dtype()); }
  // A device tensor back on the host as f32 NCHW.
  Tensor down(const Tensor& device) const {
    Tensor f32 = device;
    if (device.dtype() != DType::f32) {
      f32 = gpu_->empty(device.shape(), DType::f32, device.layout());
      gpu_->cast(device, f32);
    }
    const std::vector<float> values = f32.to_vector(*stream_);
    Tensor host(device.shape(), DType::f32, Device::cpu(), device.rank() == 4 ? device.layout() : TensorLayout::nchw);
    std::copy(values.begin(), values.end(), host.f32().begin());
    return host.rank() == 4 ? to_layout(host, TensorLayout::nchw) : host;
  }
  // Random inputs, rounded to the dtype under test.
  Tensor input(const Shape& shape, std::uint64_t seed, double lo = -1, double hi = 1) const {
    return rounded(random_tensor(shape, seed, lo, hi), dtype());
  }
  // The batch-norm kernels (training forward, backward, inference) against the CPU's on one shape.
  void batch_norm_matches_the_cpu(const Shape& shape);
  // The fused batch norm (+ residual) + ReLU against the CPU's separate kernels on one shape.
  void fused_batch_norm_matches_the_cpu(const Shape& shape, bool with_residual);

  Tensor copy(const Tensor& host) const {
    Tensor t(host.shape());
    t.copy_from(host);
    return t;
  }
};

TEST_P(CudaBackendTest, Conv2dMatchesTheCpu) {
  const Conv2dGeometry geometries[] = {
      {.in_channels = 3, .out_channels = 8, .kernel = 3, .stride = 1, .padding = 1},
      {.in_channels = 8, .out_channels = 16, .kernel = 3, .stride = 2, .padding = 1},
      {.in_channels = 8, .out_channels = 8, .kernel = 3, .stride = 1, .padding = 1, .groups = 8},
      {.in_channels = 4, .out_channels = 6, .kernel = 1},
      {.in_channels = 4, .out_channels = 4, .kernel = 3, .padding = 2, .dilation = 2, .groups = 2},
  };
  std::uint64_t seed = 100;
  for (const Conv2dGeometry& g : geometries) {
    SCOPED_TRACE("conv cin " + std::to_string(g.in_channels) + " cout " + std::to_string(g.out_channels) + " k" +
                 std::to_string(g.kernel) + " s" + std::to_string(g.stride) + " groups " + std::to_string(g.groups));
    const std::int64_t h = 9, w = 9;
    const Shape out_shape{2, g.out_channels, g.output_size(h), g.output_size(w)};
    const Tensor x = input({2, g.in_channels, h, w}, ++seed);
    const Tensor weight = input(g.weight_shape(), ++seed, -0.5, 0.5);
    const Tensor bias = input({g.out_channels}, ++seed);
    const Tensor dy = input(out_shape, ++seed);
    const Tensor dw0 = input(g.weight_shape(), ++seed);  // gradients accumulate into these
    const Tensor db0 = input({g.out_channels}, ++seed);

    Tensor y_cpu(out_shape), dx_cpu({2, g.in_channels, h, w});
    Tensor dw_cpu = copy(dw0), db_cpu = copy(db0);
    cpu_->conv2d_forward(g, x, weight, bias, y_cpu);
    cpu_->conv2d_backward_data(g, dy, weight, dx_cpu);
    cpu_->conv2d_backward_filter(g, x, dy, dw_cpu, db_cpu);

    const Tensor x_gpu = up(x), w_gpu = up(weight), dy_gpu = up(dy), dw_gpu = up(dw0), db_gpu = up(db0);
    const Tensor y_gpu = gpu_->empty(out_shape, dtype(), layout());
    const Tensor dx_gpu = gpu_->empty(x.shape(), dtype(), layout());
    gpu_->conv2d_forward(g, x_gpu, w_gpu, up(bias), y_gpu);
    gpu_->conv2d_backward_data(g, dy_gpu, w_gpu, dx_gpu);
    gpu_->conv2d_backward_filter(g, x_gpu, dy_gpu, dw_gpu, db_gpu);
    // Once more: the algorithms come from the cache now, and must give the same.
    gpu_->conv2d_forward(g, x_gpu, w_gpu, up(bias), y_gpu);

    expect_close(y_cpu, down(y_gpu), tol(), "y");
    expect_close(dx_cpu, down(dx_gpu), tol(), "dx");
    expect_close(dw_cpu, down(dw_gpu), tol(), "dw (accumulated)");
    expect_close(db_cpu, down(db_gpu), tol(), "db (accumulated)");
  }
}

TEST_P(CudaBackendTest, LinearMatchesTheCpu) {
  const std::int64_t n = 5, in = 37, out = 11;
  const Tensor x = input({n, in}, 1), w = input({out, in}, 2), b = input({out}, 3), dy = input({n, out}, 4);
  const Tensor dw0 = input({out, in}, 5), db0 = input({out}, 6);
  Tensor y_cpu({n, out}), dx_cpu({n, in});
  Tensor dw_cpu = copy(dw0), db_cpu = copy(db0);
  cpu_->linear_forward(x, w, b, y_cpu);
  cpu_->linear_backward(x, w, dy, dx_cpu, dw_cpu, db_cpu);

  const Tensor x_gpu = up(x), w_gpu = up(w), dw_gpu = up(dw0), db_gpu = up(db0);
  const Tensor y_gpu = gpu_->empty({n, out}, dtype(), TensorLayout::nchw);
  const Tensor dx_gpu = gpu_->empty({n, in}, dtype(), TensorLayout::nchw);
  gpu_->linear_forward(x_gpu, w_gpu, up(b), y_gpu);
  gpu_->linear_backward(x_gpu, w_gpu, up(dy), dx_gpu, dw_gpu, db_gpu);
  expect_close(y_cpu, down(y_gpu), tol(), "y");
  expect_close(dx_cpu, down(dx_gpu), tol(), "dx");
  expect_close(dw_cpu, down(dw_gpu), tol(), "dw (accumulated)");
  expect_close(db_cpu, down(db_gpu), tol(), "db (accumulated)");

  // Without a bias and without dx: the optional arguments.
  Tensor y2_cpu({n, out});
  cpu_->linear_forward(x, w, Tensor(), y2_cpu);
  gpu_->linear_forward(x_gpu, w_gpu, Tensor(), y_gpu);
  expect_close(y2_cpu, down(y_gpu), tol(), "y without bias");
  cpu_->linear_backward(x, w, dy, Tensor(), dw_cpu, Tensor());
  gpu_->linear_backward(x_gpu, w_gpu, up(dy), Tensor(), dw_gpu, Tensor());
  expect_close(dw_cpu, down(dw_gpu), tol(), "dw accumulated twice");
}

// Four shapes: channels that do not fill a 16-byte pack, channels that do, a number of packs per
// row that is not a power of two (5 of bf16, 10 of f32: blocks of 5 or 10 lanes), and enough rows
// for the channels-last kernels to split them into many groups.
TEST_P(CudaBackendTest, BatchNormMatchesTheCpu) {
  for (const Shape& shape : {Shape{3, 5, 6, 7}, Shape{4, 16, 5, 6}, Shape{2, 40, 9, 11}, Shape{8, 64, 14, 14}}) {
    SCOPED_TRACE(to_string(shape));
    batch_norm_matches_the_cpu(shape);
  }
}

void CudaBackendTest::batch_norm_matches_the_cpu(const Shape& shape) {
  const std::int64_t c = shape[1];
  const Tensor x = input(shape, 11, -2, 3), dy = input(shape, 12);
  const Tensor gamma = random_tensor({c}, 13, 0.5, 1.5), beta = random_tensor({c}, 14);
  const Tensor rm0 = random_tensor({c}, 15), rv0 = random_tensor({c}, 16, 0.5, 2);
  const Tensor dgamma0 = random_tensor({c}, 17), dbeta0 = random_tensor({c}, 18);
  const double momentum = 0.1, eps = 1e-5;

  Tensor y_cpu(shape), mean_cpu({c}), invstd_cpu({c}), dx_cpu(shape), y_eval_cpu(shape);
  Tensor rm_cpu = copy(rm0), rv_cpu = copy(rv0), dgamma_cpu = copy(dgamma0), dbeta_cpu = copy(dbeta0);
  cpu_->batch_norm_forward_training(x, gamma, beta, rm_cpu, rv_cpu, momentum, eps, y_cpu, mean_cpu, invstd_cpu);
  cpu_->batch_norm_backward(x, dy, gamma, mean_cpu, invstd_cpu, dx_cpu, dgamma_cpu, dbeta_cpu);
  cpu_->batch_norm_forward_inference(x, gamma, beta, rm_cpu, rv_cpu, eps, y_eval_cpu);

  const Tensor x_gpu = up(x), dy_gpu = up(dy);
  const Tensor gamma_gpu = up(gamma, DType::f32), beta_gpu = up(beta, DType::f32);
  const Tensor rm_gpu = up(rm0, DType::f32), rv_gpu = up(rv0, DType::f32);
  const Tensor dgamma_gpu = up(dgamma0, DType::f32), dbeta_gpu = up(dbeta0, DType::f32);
  const Tensor mean_gpu = gpu_->empty({c}, DType::f32, TensorLayout::nchw);
  const Tensor invstd_gpu = gpu_->empty({c}, DType::f32, TensorLayout::nchw);
  const Tensor y_gpu = gpu_->empty(shape, dtype(), layout());
  const Tensor dx_gpu = gpu_->empty(shape, dtype(), layout());
  const Tensor y_eval_gpu = gpu_->empty(shape, dtype(), layout());
  gpu_->batch_norm_forward_training(x_gpu, gamma_gpu, beta_gpu, rm_gpu, rv_gpu, momentum, eps, y_gpu, mean_gpu,
                                    invstd_gpu);
  gpu_->batch_norm_backward(x_gpu, dy_gpu, gamma_gpu, mean_gpu, invstd_gpu, dx_gpu, dgamma_gpu, dbeta_gpu);
  gpu_->batch_norm_forward_inference(x_gpu, gamma_gpu, beta_gpu, rm_gpu, rv_gpu, eps, y_eval_gpu);

  // The statistics are computed in double from the same (rounded) inputs: f32 tolerances.
  const Tolerance f32 = tolerance_of(DType::f32);
  expect_close(mean_cpu, down(mean_gpu), f32, "saved_mean");
  expect_close(invstd_cpu, down(invstd_gpu), f32, "saved_invstd");
  expect_close(rm_cpu, down(rm_gpu), f32, "running_mean");
  expect_close(rv_cpu, down(rv_gpu), f32, "running_var");
  expect_close(dgamma_cpu, down(dgamma_gpu), f32, "dgamma (accumulated)");
  expect_close(dbeta_cpu, down(dbeta_gpu), f32, "dbeta (accumulated)");
  expect_close(y_cpu, down(y_gpu), tol(), "y");
  expect_close(dx_cpu, down(dx_gpu), tol(), "dx");
  expect_close(y_eval_cpu, down(y_eval_gpu), tol(), "y (inference)");
}

// batch_norm_relu_* (one pass on channels-last images; on NCHW the base's composition) against
// the CPU's batch norm, add and ReLU. The backward's reference masks dy by the GPU's own output:
// near 0, a half-precision y rounded once (fused) or at each step (separate) may differ in sign,
// which would flip single elements of the mask, not the arithmetic under test.
TEST_P(CudaBackendTest, FusedBatchNormReluMatchesTheCpu) {
  for (const Shape& shape : {Shape{3, 5, 6, 7}, Shape{4, 16, 5, 6}, Shape{8, 64, 14, 14}}) {
    for (const bool with_residual : {false, true}) {
      SCOPED_TRACE(to_string(shape) + (with_residual ? " with a residual" : ""));
      fused_batch_norm_matches_the_cpu(shape, with_residual);
    }
  }
}

void CudaBackendTest::fused_batch_norm_matches_the_cpu(const Shape& shape, bool with_residual) {
  const std::int64_t c = shape[1];
  const Tensor x = input(shape, 31, -2, 3), dy = input(shape, 32), residual = input(shape, 33);
  const Tensor gamma = random_tensor({c}, 34, 0.5, 1.5), beta = random_tensor({c}, 35, -0.5, 0.5);
  const Tensor rm0 = random_tensor({c}, 36), rv0 = random_tensor({c}, 37, 0.5, 2);
  const double momentum = 0.1, eps = 1e-5;

  Tensor y_cpu(shape), mean_cpu({c}), invstd_cpu({c});
  Tensor rm_cpu = copy(rm0), rv_cpu = copy(rv0);
  cpu_->batch_norm_forward_training(x, gamma, beta, rm_cpu, rv_cpu, momentum, eps, y_cpu, mean_cpu, invstd_cpu);
  if (with_residual) cpu_->add(y_cpu, residual, y_cpu);
  cpu_->relu_forward(y_cpu, y_cpu);

  const Tensor x_gpu = up(x), dy_gpu = up(dy);
  const Tensor residual_gpu = with_residual ? up(residual) : Tensor();
  const Tensor gamma_gpu = up(gamma, DType::f32), beta_gpu = up(beta, DType::f32);
  const Tensor rm_gpu = up(rm0, DType::f32), rv_gpu = up(rv0, DType::f32);
  const Tensor mean_gpu = gpu_->empty({c}), invstd_gpu = gpu_->empty({c});
  const Tensor dgamma_gpu = gpu_->zeros({c}), dbeta_gpu = gpu_->zeros({c});
  const Tensor y_gpu = gpu_->empty(shape, dtype(), layout());
  const Tensor dx_gpu = gpu_->empty(shape, dtype(), layout());
  const Tensor dresidual_gpu = with_residual ? gpu_->empty(shape, dtype(), layout()) : Tensor();
  gpu_->batch_norm_relu_forward_training(x_gpu, gamma_gpu, beta_gpu, rm_gpu, rv_gpu, momentum, eps, residual_gpu, y_gpu,
                                         mean_gpu, invstd_gpu);
  gpu_->batch_norm_relu_backward(x_gpu, y_gpu, dy_gpu, gamma_gpu, mean_gpu, invstd_gpu, dx_gpu, dresidual_gpu,
                                 dgamma_gpu, dbeta_gpu);

  const Tolerance f32 = tolerance_of(DType::f32);
  const Tensor y_seen = down(y_gpu);
  expect_close(y_cpu, y_seen, tol(), "y");
  expect_close(mean_cpu, down(mean_gpu), f32, "saved_mean");
  expect_close(invstd_cpu, down(invstd_gpu), f32, "saved_invstd");
  expect_close(rm_cpu, down(rm_gpu), f32, "running_mean");
  expect_close(rv_cpu, down(rv_gpu), f32, "running_var");

  Tensor dz(shape);
  for (std::size_t i = 0; i < dz.f32().size(); ++i) dz.f32()[i] = y_seen.f32()[i] > 0 ? dy.f32()[i] : 0.0f;
  Tensor dx_cpu(shape), dgamma_cpu = Tensor::zeros({c}), dbeta_cpu = Tensor::zeros({c});
  cpu_->batch_norm_backward(x, dz, gamma, mean_cpu, invstd_cpu, dx_cpu, dgamma_cpu, dbeta_cpu);
  expect_close(dgamma_cpu, down(dgamma_gpu), f32, "dgamma");
  expect_close(dbeta_cpu, down(dbeta_gpu), f32, "dbeta");
  expect_close(dx_cpu, down(dx_gpu), tol(), "dx");
  if (with_residual) {
    EXPECT_EQ(dz.to_vector(), down(dresidual_gpu).to_vector()) << "dresidual = dy masked";
  }
}

TEST_P(CudaBackendTest, ElementwiseKernelsMatchTheCpu) {
  const Shape shape{2, 3, 5, 7};
  const Tensor x = input(shape, 21), b = input(shape, 22), dy = input(shape, 23);
  Tensor relu_cpu(shape), relu_dx_cpu(shape), sum_cpu(shape), drop_cpu(shape), drop_dx_cpu(shape);
  Tensor mask_cpu(shape, DType::u8);
  cpu_->relu_forward(x, relu_cpu);
  cpu_->relu_backward(relu_cpu, dy, relu_dx_cpu);
  cpu_->add(x, b, sum_cpu);
  cpu_->dropout_forward(x, 0.3f, 1234, mask_cpu, drop_cpu);
  cpu_->dropout_backward(dy, mask_cpu, 0.3f, drop_dx_cpu);
  Tensor scaled_cpu = copy(x);
  cpu_->scale(scaled_cpu, -0.75f);

  const Tensor x_gpu = up(x), dy_gpu = up(dy);
  const Tensor relu_gpu = gpu_->empty(shape, dtype(), layout());
  const Tensor relu_dx_gpu = gpu_->empty(shape, dtype(), layout());
  const Tensor sum_gpu = gpu_->empty(shape, dtype(), layout());
  const Tensor drop_gpu = gpu_->empty(shape, dtype(), layout());
  const Tensor drop_dx_gpu = gpu_->empty(shape, dtype(), layout());
  const Tensor mask_gpu = gpu_->empty(shape, DType::u8, layout());
  gpu_->relu_forward(x_gpu, relu_gpu);
  gpu_->relu_backward(relu_gpu, dy_gpu, relu_dx_gpu);
  gpu_->add(x_gpu, up(b), sum_gpu);
  gpu_->scale(x_gpu, -0.75f);  // in place
  expect_close(relu_cpu, down(relu_gpu), tol(), "relu");
  expect_close(relu_dx_cpu, down(relu_dx_gpu), tol(), "relu dx");
  expect_close(sum_cpu, down(sum_gpu), tol(), "add");
  expect_close(scaled_cpu, down(x_gpu), tol(), "scale");

  // Dropout's mask is a function of (seed, element index in memory): compare it in NCHW, where
  // memory order is the CPU's.
  if (layout() == TensorLayout::nchw) {
    const Tensor x2 = up(x);
    gpu_->dropout_forward(x2, 0.3f, 1234, mask_gpu, drop_gpu);
    gpu_->dropout_backward(dy_gpu, mask_gpu, 0.3f, drop_dx_gpu);
    EXPECT_EQ(mask_cpu.to_vector(), mask_gpu.to_vector(*stream_)) << "the masks must be identical";
    expect_close(drop_cpu, down(drop_gpu), tol(), "dropout");
    expect_close(drop_dx_cpu, down(drop_dx_gpu), tol(), "dropout dx");
  }
}

TEST_P(CudaBackendTest, PoolingMatchesTheCpu) {
  const Pool2dGeometry geometries[] = {
      {.kernel = 2, .stride = 2}, {.kernel = 3, .stride = 2, .padding = 1}, {.kernel = 3, .stride = 1, .padding = 1}};
  const Shape shape{2, 3, 9, 8};
  // Rounded to a coarse grid so that windows hold ties: the first maximum must win on both.
  Tensor x = input(shape, 31);
  for (float& v : x.f32()) v = std::round(v * 4) / 4;
  for (const Pool2dGeometry& g : geometries) {
    SCOPED_TRACE("pool k" + std::to_string(g.kernel) + " s" + std::to_string(g.stride) + " p" +
                 std::to_string(g.padding));
    const Shape pooled{shape[0], shape[1], g.output_size(shape[2]), g.output_size(shape[3])};
    const Tensor dy = input(pooled, 32);
    Tensor y_cpu(pooled), dx_cpu(shape);
    cpu_->max_pool2d_forward(g, x, y_cpu);
    cpu_->max_pool2d_backward(g, x, y_cpu, dy, dx_cpu);
    const Tensor x_gpu = up(x);
    const Tensor y_gpu = gpu_->empty(pooled, dtype(), layout());
    const Tensor dx_gpu = gpu_->empty(shape, dtype(), layout());
    gpu_->max_pool2d_forward(g, x_gpu, y_gpu);
    gpu_->max_pool2d_backward(g, x_gpu, y_gpu, up(dy), dx_gpu);
    expect_close(y_cpu, down(y_gpu), tol(), "max pool y");
    expect_close(dx_cpu, down(dx_gpu), tol(), "max pool dx");
  }
  const Tensor dy = input({shape[0], shape[1]}, 33);
  Tensor y_cpu({shape[0], shape[1]}), dx_cpu(shape);
  cpu_->global_avg_pool_forward(x, y_cpu);
  cpu_->global_avg_pool_backward(dy, dx_cpu);
  const Tensor y_gpu = gpu_->empty({shape[0], shape[1]}, dtype(), TensorLayout::nchw);
  const Tensor dx_gpu = gpu_->empty(shape, dtype(), layout());
  gpu_->global_avg_pool_forward(up(x), y_gpu);
  gpu_->global_avg_pool_backward(up(dy), dx_gpu);
  expect_close(y_cpu, down(y_gpu), tol(), "global avg pool y");
  expect_close(dx_cpu, down(dx_gpu), tol(), "global avg pool dx");
}

TEST_P(CudaBackendTest, SoftmaxCrossEntropyMatchesTheCpu) {
  const std::int64_t n = 6, k = 300;  // more classes than a block has threads
  const Tensor logits = input({n, k}, 41, -4, 4);
  Tensor labels({n}, DType::i32);
  for (std::int64_t i = 0; i < n; ++i) labels.data_as<std::int32_t>()[i] = static_cast<std::int32_t>((i * 97) % k);
  // Make row 0 right: its label holds the largest logit.
  logits.f32()[static_cast<std::size_t>(labels.data_as<std::int32_t>()[0])] = 10;
  Tensor stats_cpu({2}), dlogits_cpu({n, k});
  cpu_->softmax_cross_entropy(logits, labels, 0.1f, 0.5f, stats_cpu, dlogits_cpu);

  const Tensor labels_gpu = labels.to(Device::cuda(0), *stream_);
  const Tensor stats_gpu = gpu_->empty({2}, DType::f32, TensorLayout::nchw);
  const Tensor dlogits_gpu = gpu_->empty({n, k}, dtype(), TensorLayout::nchw);
  gpu_->softmax_cross_entropy(up(logits), labels_gpu, 0.1f, 0.5f, stats_gpu, dlogits_gpu);
  const std::vector<float> stats = stats_gpu.to_vector(*stream_);
  EXPECT_NEAR(stats[0], stats_cpu.f32()[0], 1e-5 * std::abs(static_cast<double>(stats_cpu.f32()[0])));
  EXPECT_EQ(stats[1], stats_cpu.f32()[1]);
  EXPECT_GE(stats[1], 1.0f);
  expect_close(dlogits_cpu, down(dlogits_gpu), tol(), "dlogits");

  // A label out of range: the CPU throws; CUDA reports it as a NaN loss.
  labels.data_as<std::int32_t>()[2] = static_cast<std::int32_t>(k);
  gpu_->softmax_cross_entropy(up(logits), labels.to(Device::cuda(0), *stream_), 0, 1, stats_gpu, Tensor());
  EXPECT_TRUE(std::isnan(stats_gpu.to_vector(*stream_)[0]));
}

TEST_P(CudaBackendTest, BinaryCrossEntropyMatchesTheCpu) {
  const std::int64_t n = 5, k = 300;                 // more classes than a block has threads
  const Tensor logits = input({n, k}, 42, -30, 30);  // far enough out that softplus must be stable
  const Tensor targets = random_tensor({n, k}, 43, 0, 1);
  const Tensor pos_weight = random_tensor({k}, 44, 0.5, 3);
  // Row 0 right everywhere: its targets follow its logits' signs.
  for (std::int64_t j = 0; j < k; ++j) {
    targets.f32()[static_cast<std::size_t>(j)] = logits.f32()[static_cast<std::size_t>(j)] > 0 ? 1.0f : 0.0f;
  }
  for (const bool weighted : {false, true}) {
    SCOPED_TRACE(weighted ? "pos_weight" : "no pos_weight");
    Tensor stats_cpu({2}), dlogits_cpu({n, k});
    cpu_->binary_cross_entropy_with_logits(logits, targets, weighted ? pos_weight : Tensor(), 0.5f, stats_cpu,
                                           dlogits_cpu);
    const Tensor stats_gpu = gpu_->empty({2}, DType::f32, TensorLayout::nchw);
    const Tensor dlogits_gpu = gpu_->empty({n, k}, dtype(), TensorLayout::nchw);
    gpu_->binary_cross_entropy_with_logits(up(logits), up(targets, DType::f32),
                                           weighted ? up(pos_weight, DType::f32) : Tensor(), 0.5f, stats_gpu,
                                           dlogits_gpu);
    const std::vector<float> stats = stats_gpu.to_vector(*stream_);
    EXPECT_NEAR(stats[0], stats_cpu.f32()[0], 1e-5 * std::abs(static_cast<double>(stats_cpu.f32()[0])));
    EXPECT_EQ(stats[1], stats_cpu.f32()[1]);
    EXPECT_GE(stats[1], 1.0f);
    expect_close(dlogits_cpu, down(dlogits_gpu), tol(), "dlogits");
  }
}

INSTANTIATE_TEST_SUITE_P(DtypesAndLayouts, CudaBackendTest,
                         ::testing::Values(std::tuple{DType::f32, TensorLayout::nchw},
                                           std::tuple{DType::f32, TensorLayout::nhwc},
                                           std::tuple{DType::bf16, TensorLayout::nchw},
                                           std::tuple{DType::bf16, TensorLayout::nhwc},
                                           std::tuple{DType::f16, TensorLayout::nhwc}),
                         [](const auto& param_info) {
                           return std::string(to_string(std::get<0>(param_info.param))) + "_" +
                                  std::string(to_string(std::get<1>(param_info.param)));
                         });

// ---- the f32-only kernels, the casts, and the pool

class CudaBackendF32Test : public GpuAndCpu {
 protected:
  Tensor up(const Tensor& host) const { return host.to(Device::cuda(0), *stream_); }
  Tensor down(const Tensor& device) const {
    const std::vector<float> values = device.to_vector(*stream_);
    return Tensor::from_values(device.shape(), values);
  }
};

TEST_F(CudaBackendF32Test, SgdUpdateMatchesTheCpu) {
  const SgdStep steps[] = {{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 5e-4f},
                           {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = true, .grad_scale = 0.5f},
                           {.lr = 0.2f, .momentum = 0, .weight_decay = 0}};
  for (const SgdStep& step : steps) {
    const Tensor param = random_tensor({1000}, 51), grad = random_tensor({1000}, 52),
                 buffer = random_tensor({1000}, 53);
    const Tensor param_gpu = up(param), grad_gpu = up(grad), buffer_gpu = up(buffer);
    cpu_->sgd_update(param, grad, buffer, step);
    gpu_->sgd_update(param_gpu, grad_gpu, step.momentum != 0 ? buffer_gpu : Tensor(), step);
    expect_close(param, down(param_gpu), tolerance_of(DType::f32), "param");
    expect_close(buffer, down(buffer_gpu), tolerance_of(DType::f32), "momentum buffer");
  }
}

TEST_F(CudaBackendF32Test, AdamWUpdateMatchesTheCpu) {
  const AdamWStep steps[] = {
      {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f},
      {.lr = 0.02f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0, .grad_scale = 0.25f, .step = 7}};
  for (const AdamWStep& step : steps) {
    const Tensor param = random_tensor({1000}, 54), grad = random_tensor({1000}, 55),
                 exp_avg = random_tensor({1000}, 56, -0.1, 0.1), exp_avg_sq = random_tensor({1000}, 57, 0, 0.01);
    const Tensor param_gpu = up(param), grad_gpu = up(grad), exp_avg_gpu = up(exp_avg), exp_avg_sq_gpu = up(exp_avg_sq);
    cpu_->adamw_update(param, grad, exp_avg, exp_avg_sq, step);
    gpu_->adamw_update(param_gpu, grad_gpu, exp_avg_gpu, exp_avg_sq_gpu, step);
    expect_close(param, down(param_gpu), tolerance_of(DType::f32), "param");
    expect_close(exp_avg, down(exp_avg_gpu), tolerance_of(DType::f32), "exp_avg");
    expect_close(exp_avg_sq, down(exp_avg_sq_gpu), tolerance_of(DType::f32), "exp_avg_sq");
  }
}

TEST_F(CudaBackendF32Test, CastRoundsLikeTheHost) {
  const Tensor x = random_tensor({4097}, 61, -70000, 70000);
  for (const DType to : {DType::bf16, DType::f16}) {
    const Tensor narrow = gpu_->empty({4097}, to, TensorLayout::nchw);
    gpu_->cast(up(x), narrow);
    const std::vector<float> values = narrow.to_vector(*stream_);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float expected =
          to == DType::bf16 ? float_from_bf16(bf16_from_float(x.f32()[i])) : float_from_f16(f16_from_float(x.f32()[i]));
      ASSERT_EQ(std::bit_cast<std::uint32_t>(values[i]), std::bit_cast<std::uint32_t>(expected))
          << to_string(to) << " element " << i << " = " << x.f32()[i];
    }
  }
}

TEST_F(CudaBackendF32Test, AllFiniteFindsInfinitiesAndNans) {
  Tensor x = random_tensor({3000}, 71);
  EXPECT_TRUE(gpu_->all_finite(up(x)));
  x.f32()[2999] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(gpu_->all_finite(up(x)));
  x.f32()[2999] = std::numeric_limits<float>::quiet_NaN();
  const Tensor half = gpu_->empty({3000}, DType::bf16, TensorLayout::nchw);
  gpu_->cast(up(x), half);
  EXPECT_FALSE(gpu_->all_finite(half));
}

// The device loss scaler: the same checks as the CPU's (loss_scaler_checks.hpp), with no host wait.
TEST_F(CudaBackendF32Test, TheLossScalerSkipsUnscalesAndUpdatesOnItsState) { testing::expect_loss_scaler_works(*gpu_); }

TEST_F(CudaBackendF32Test, EmptyReusesFreedMemory) {
  void* first = gpu_->empty({1000}, DType::f32, TensorLayout::nchw).data();  // freed at once
  const Tensor again = gpu_->empty({1000}, DType::f32, TensorLayout::nchw);
  EXPECT_EQ(again.data(), first);
  EXPECT_TRUE(again.owning());
  EXPECT_EQ(again.device(), Device::cuda(0));
  // A tensor may outlive its backend: its memory is then freed, not cached.
  gpu_.reset();
  stream_->synchronize();
}

TEST_F(CudaBackendF32Test, DescribeNamesTheLibraries) {
  const std::string text = gpu_->describe();
  EXPECT_NE(text.find("cuda:0"), std::string::npos) << text;
  EXPECT_NE(text.find("cuDNN"), std::string::npos) << text;
  EXPECT_NE(text.find("cuBLAS"), std::string::npos) << text;
}

// ---- the file of cuDNN's algorithm choices (nn/src/conv_algorithm_cache.hpp)

// The only cudnn-algorithms-*.json in `folder` (empty when there is none or more than one).
fs::path algorithm_file_in(const fs::path& folder) {
  std::vector<fs::path> found;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("cudnn-algorithms-") && name.ends_with(".json")) found.push_back(entry.path());
  }
  return found.size() == 1 ? found.front() : fs::path();
}

std::string text_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

ino_t inode_of(const fs::path& path) {
  struct stat status {};
  return ::stat(path.c_str(), &status) == 0 ? status.st_ino : 0;
}

// A backend with the folder of an earlier one takes that one's choices from the file and searches
// nothing: the file stays as it was (each search rewrites it, through a new file renamed over it,
// as a new shape shows), and the convolution gives the same values.
TEST(CudaBackendAlgorithmFileTest, ASecondBackendTakesTheFirstsChoices) {
  if (gpu::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << gpu::cuda_unavailable_reason();
  const fs::path folder = fs::temp_directory_path() / ("stoke_algorithm_file_" + std::to_string(::getpid()));
  fs::remove_all(folder);
  const test::ScopedEnvironment cache("STOKE_CACHE", folder.string());
  const test::ScopedEnvironment on("STOKE_CUDNN_CACHE", "1");
  Stream stream(Device::cuda(0));
  const Conv2dGeometry g{.in_channels = 3, .out_channels = 8, .kernel = 3, .stride = 1, .padding = 1};
  const auto conv = [&](Backend& backend, std::int64_t batch) {
    const Tensor x = random_tensor({batch, 3, 9, 9}, 1).to(Device::cuda(0), stream);
    const Tensor w = random_tensor(g.weight_shape(), 2).to(Device::cuda(0), stream);
    const Tensor y = backend.empty({batch, 8, 9, 9}, DType::f32, TensorLayout::nchw);
    backend.conv2d_forward(g, x, w, Tensor(), y);
    return y.to_vector(stream);
  };

  const std::vector<float> first = conv(*make_backend(Device::cuda(0), stream), 2);
  const fs::path file = algorithm_file_in(folder);
  ASSERT_FALSE(file.empty()) << "no cudnn-algorithms-*.json in " << folder;
  const std::string saved = text_of(file);
  EXPECT_NE(saved.find("\"key\": \"fwd x[2, 3, 9, 9]"), std::string::npos) << saved;
  const ino_t inode = inode_of(file);

  const std::unique_ptr<Backend> second = make_backend(Device::cuda(0), stream);
  EXPECT_EQ(conv(*second, 2), first);
  EXPECT_EQ(inode_of(file), inode) << "the second backend searched again and rewrote " << file;
  EXPECT_EQ(text_of(file), saved);
  conv(*second, 3);  // a new shape: searched, and saved beside the first
  EXPECT_NE(inode_of(file), inode);
  EXPECT_NE(text_of(file).find("\"key\": \"fwd x[3, 3, 9, 9]"), std::string::npos);
  EXPECT_NE(text_of(file).find("\"key\": \"fwd x[2, 3, 9, 9]"), std::string::npos);

  // STOKE_CUDNN_CACHE=0: no file at all.
  fs::remove_all(folder);
  {
    const test::ScopedEnvironment off("STOKE_CUDNN_CACHE", "0");
    conv(*make_backend(Device::cuda(0), stream), 2);
  }
  EXPECT_FALSE(fs::exists(folder));
  fs::remove_all(folder);
}

// ---- one training step of each model on both backends

struct StepCase {
  const char* model;
  int size;       // image side: the ResNets need 32 px and more
  DType compute;  // f32 NCHW, or bf16 / f16 channels-last
  double loss;    // relative bound on the loss
  double step;    // relative L2 bound on each parameter's change, and in half precision on the model's (see below)
};

void PrintTo(const StepCase& c, std::ostream* os) {
  *os << c.model << " " << to_string(c.compute) << " at " << c.size << " px";
}

// Random batch-norm shifts (and classifier biases). The models start with every beta at 0, and
// there a gamma followed by ReLU, a convolution and another batch norm does not change the loss
// (ReLU is positively homogeneous and the next batch norm removes the scale): its gradient is a
// rounding residue, different in any two correct implementations (9% between the CPU and an H200
// in f32, and 20 times the step itself in bf16, on the first GPU run).
void randomize_shifts(Layer& model) {
  std::uint64_t seed = 100;
  model.for_each_parameter([&](const std::string& name, Parameter& p) {
    if (p.value.rank() == 1 && name.ends_with(".bias")) p.value = random_tensor(p.value.shape(), seed++, -0.5, 0.5);
  });
}

// The relative error of the whole model's step (every parameter's change, concatenated).
double model_step_error(const ParameterValues& actual, const ParameterValues& expected, const ParameterValues& start) {
  std::vector<float> a;
  std::vector<float> e;
  for (const auto& [name, values] : expected) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      e.push_back(values[i] - start.at(name)[i]);
      a.push_back(actual.at(name)[i] - start.at(name)[i]);
    }
  }
  return relative_error(a, e);
}

// The entries of `values` for the model's parameters of rank 2 and more (filters, weight matrices).
ParameterValues weights_only(Layer& model, const ParameterValues& values) {
  ParameterValues kept;
  model.for_each_parameter([&](const std::string& name, Parameter& p) {
    if (p.value.rank() >= 2) kept[name] = values.at(name);
  });
  return kept;
}

class CudaTrainingStepTest : public CudaBackendF32Test, public ::testing::WithParamInterface<StepCase> {};

// Two steps from the same seed on the GPU and on a reference that does the same arithmetic on the
// CPU: in f32 the CpuBackend; in bf16 and f16 the EmulatedBackend (half-precision storage, f32
// arithmetic, channels-last), since against f32 a deep model's first half-precision steps differ
// by 20-40% on the CPU alone (rounding flips ReLU masks and max-pool winners). The losses agree,
// and every parameter moved by about the same (testing::expect_same_steps). The models are built
// fused (ModelOptions::fuse): the GPU runs its one-pass batch norm + ReLU (+ residual) kernels in
// channels-last, the references the separate kernels (the base Backend's composition).
TEST_P(CudaTrainingStepTest, MatchesTheCpu) {
  const StepCase& c = GetParam();
  const bool half = c.compute != DType::f32;
  const TensorLayout layout = half ? TensorLayout::nhwc : TensorLayout::nchw;
  const ModelOptions options{.classes = 10, .seed = 5, .width = 8};
  std::unique_ptr<Sequential> reference_model = make_model(c.model, options);
  std::unique_ptr<Sequential> gpu_model = make_model(c.model, options);
  randomize_shifts(*reference_model);
  randomize_shifts(*gpu_model);
  const ParameterValues start = parameter_values(*reference_model);
  reference_model->to_layout(layout);
  gpu_model->to(Device::cuda(0), *stream_);
  gpu_model->to_layout(layout, *stream_);

  const std::int64_t n = 8;
  const Tensor images = to_layout(random_tensor({n, 3, c.size, c.size}, 81), layout);
  Tensor labels({n}, DType::i32);
  for (std::int64_t i = 0; i < n; ++i) labels.data_as<std::int32_t>()[i] = static_cast<std::int32_t>(i * 3 % 10);
  const TrainerOptions options_for{.sgd = {.momentum = 0.9f, .weight_decay = 5e-4f},
                                   .schedule = {.kind = LrScheduleKind::constant, .base_lr = 0.05f},
                                   .label_smoothing = 0.1f,
                                   .accumulation = 1,
                                   .seed = 9,
                                   .compute = c.compute,
                                   .loss_scale = {.initial = 1024.0f}};  // f16: inside the range for these batches
  testing::EmulatedBackend emulated;
  Backend& reference_backend = half ? static_cast<Backend&>(emulated) : *cpu_;
  Trainer reference(*reference_model, reference_backend, options_for);
  Trainer gpu(*gpu_model, *gpu_, options_for);
  const Tensor gpu_images = images.to(Device::cuda(0), *stream_);
  const Tensor gpu_labels = labels.to(Device::cuda(0), *stream_);
  for (int step = 0; step < 2; ++step) {
    const LossStats expected = reference.train_batch(images, labels).read();
    const LossStats actual = gpu.train_batch(gpu_images, gpu_labels).read(*stream_);
    EXPECT_NEAR(actual.loss, expected.loss, c.loss * std::abs(expected.loss)) << c.model << " step " << step;
  }
  EXPECT_EQ(gpu.skipped_steps(), 0);
  const ParameterValues actual = parameter_values(*gpu_model, *stream_);
  const ParameterValues expected = parameter_values(*reference_model);
  const double model_error = model_step_error(actual, expected, start);
  std::printf("%s %s: the model's step differs by %.3g (relative L2) from the reference's\n", c.model,
              std::string(to_string(c.compute)).c_str(), model_error);
  if (!half) {
    expect_same_steps(actual, expected, start, c.step, c.model);
    return;
  }
  // In half precision the per-channel parameters (batch norm's scales and shifts, 8 to 64 values
  // each) move by sums over a few rounded values: they differed by up to 50% from the emulation on
  // the first GPU run, where the model's step as a whole differed by 3-17%. So: each weight matrix
  // or filter on its own, the rest through the whole model's step.
  EXPECT_LE(model_error, c.step) << c.model;
  expect_same_steps(weights_only(*reference_model, actual), weights_only(*reference_model, expected),
                    weights_only(*reference_model, start), c.step, c.model);
}

INSTANTIATE_TEST_SUITE_P(
    Models, CudaTrainingStepTest,
    ::testing::Values(
        StepCase{"small_cnn", 32, DType::f32, 1e-4, 1e-2}, StepCase{"mobilenet", 32, DType::f32, 1e-4, 1e-2},
        StepCase{"resnet18", 64, DType::f32, 1e-4, 1e-2}, StepCase{"resnet50", 64, DType::f32, 1e-4, 1e-2},
        StepCase{"small_cnn", 32, DType::bf16, 1e-2, 0.35}, StepCase{"mobilenet", 32, DType::bf16, 1e-2, 0.35},
        StepCase{"resnet18", 64, DType::bf16, 1e-2, 0.35}, StepCase{"resnet50", 64, DType::bf16, 1e-2, 0.35},
        StepCase{"small_cnn", 32, DType::f16, 5e-3, 0.2}, StepCase{"resnet50", 64, DType::f16, 5e-3, 0.2}),
    [](const ::testing::TestParamInfo<StepCase>& param_info) {
      return std::string(param_info.param.model) + "_" + std::string(to_string(param_info.param.compute));
    });

}  // namespace
}  // namespace stoke::nn
