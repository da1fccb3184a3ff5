// expect_loss_scaler_works: the fp16 loss scaler's backend operations (backend.hpp's
// LossScaleState) on any backend -- the overflow flag set and cleared for f32 and f16 gradients, the
// scale's growth and backoff, the loss gradient's scaling, and SGD's skip and unscale -- for the CPU
// (backend_cpu_test.cpp) and CUDA (cuda_backend_gpu_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <stoke/nn/backend.hpp>
#include <vector>

namespace stoke::nn::testing {

inline void expect_loss_scaler_works(Backend& backend) {
  const StreamView stream = backend.stream();
  const auto on = [&](const std::vector<float>& values) {
    const Tensor t = backend.empty({static_cast<std::int64_t>(values.size())});
    t.copy_from(Tensor::from_values({static_cast<std::int64_t>(values.size())}, values), stream);
    return t;
  };
  const auto state_is = [&](const Tensor& state, const std::vector<float>& expected, const char* what) {
    EXPECT_EQ(state.to_vector(stream), expected) << what << " (scale, good steps, skipped, found_inf)";
  };
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor state = on({1024, 0, 0, 0});
  const Tensor finite = on({1, -2, 3});
  const Tensor overflowed = on({1, inf, 3});
  const Tensor nan = on({std::numeric_limits<float>::quiet_NaN()});
  const Tensor half_inf = backend.empty({1}, DType::f16);
  backend.cast(on({inf}), half_inf);

  backend.find_non_finite(std::vector<Tensor>{finite}, state);
  state_is(state, {1024, 0, 0, 0}, "all finite");
  backend.find_non_finite(std::vector<Tensor>{finite, overflowed}, state);
  state_is(state, {1024, 0, 0, 1}, "an infinity");
  backend.find_non_finite(std::vector<Tensor>{finite}, state);
  state_is(state, {1024, 0, 0, 0}, "cleared by the next check");
  backend.find_non_finite(std::vector<Tensor>{nan}, state);
  state_is(state, {1024, 0, 0, 1}, "a NaN");
  backend.find_non_finite(std::vector<Tensor>{finite, half_inf}, state);
  state_is(state, {1024, 0, 0, 1}, "an f16 infinity");

  // Growth after 2 good steps (interval 2, growth 2), backoff 0.5 after an overflow.
  backend.update_loss_scale(state, 2, 0.5f, 2);
  state_is(state, {512, 0, 1, 1}, "backed off and counted as skipped");
  backend.find_non_finite(std::vector<Tensor>{finite}, state);
  backend.update_loss_scale(state, 2, 0.5f, 2);
  state_is(state, {512, 1, 1, 0}, "one good step");
  backend.update_loss_scale(state, 2, 0.5f, 2);
  state_is(state, {1024, 0, 1, 0}, "grown after two");

  const Tensor dlogits = on({0.5f, -1});
  backend.multiply_by_loss_scale(dlogits, state);
  EXPECT_EQ(dlogits.to_vector(stream), (std::vector<float>{512, -1024})) << "the loss gradient, scaled";

  // SGD: an overflowed step changes nothing; otherwise g = grad * grad_scale / scale.
  const Tensor param = on({1, 2});
  const Tensor buffer = on({0, 0});
  const Tensor grad = on({1024, 2048});
  const SgdStep step{.lr = 0.5f, .momentum = 0.9f, .grad_scale = 0.5f, .loss_scale = state};
  backend.find_non_finite(std::vector<Tensor>{overflowed}, state);
  backend.sgd_update(param, grad, buffer, step);
  EXPECT_EQ(param.to_vector(stream), (std::vector<float>{1, 2})) << "a skipped step moves no weight";
  EXPECT_EQ(buffer.to_vector(stream), (std::vector<float>{0, 0})) << "nor any momentum";
  backend.find_non_finite(std::vector<Tensor>{finite}, state);
  backend.sgd_update(param, grad, buffer, step);  // g = {0.5, 1}
  EXPECT_EQ(buffer.to_vector(stream), (std::vector<float>{0.5f, 1}));
  EXPECT_EQ(param.to_vector(stream), (std::vector<float>{0.75f, 1.5f}));
}

}  // namespace stoke::nn::testing
