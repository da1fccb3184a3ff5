// Comparisons of training runs for the nn/ tests: a model's parameters as host floats in NCHW
// order, and "the two runs took about the same steps" (mixed_precision_test.cpp on the CPU,
// cuda_backend_gpu_test.cpp on a GPU).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <stoke/nn/layer.hpp>
#include <stoke/nn/tensor.hpp>
#include <string>
#include <vector>

namespace stoke::nn::testing {

using ParameterValues = std::map<std::string, std::vector<float>>;

/// The f32 master values of every parameter, on the host, in NCHW order whatever their device
/// and layout (reading a GPU's waits for `stream`).
inline ParameterValues parameter_values(Layer& model, StreamView stream = StreamView::host()) {
  ParameterValues values;
  model.for_each_parameter([&](const std::string& name, Parameter& p) {
    Tensor host = p.value.device().is_cpu() ? p.value : p.value.to(Device::cpu(), stream);
    stream.synchronize();
    if (host.rank() == 4) host = to_layout(host, TensorLayout::nchw);
    values[name] = host.to_vector();
  });
  return values;
}

/// The relative L2 error of `actual` against `expected`: |a - e| / |e| (|a - e| when e is 0).
inline double relative_error(const std::vector<float>& actual, const std::vector<float>& expected) {
  double error = 0;
  double norm = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double diff = static_cast<double>(actual.at(i)) - static_cast<double>(expected[i]);
    error += diff * diff;
    norm += static_cast<double>(expected[i]) * static_cast<double>(expected[i]);
  }
  return norm > 0 ? std::sqrt(error / norm) : std::sqrt(error);
}

/// Two runs from the same `start` moved every parameter by about the same: per tensor, the
/// relative L2 error of actual's change against expected's is at most `bound`. A tensor whose
/// change in `expected` vanished in the rounding of its values (ResNet's blocks behind a batch norm
/// whose scale starts at 0 get almost no gradient in their first steps) can only be checked to
/// stay within that rounding in `actual` too.
///
/// The change, not the values (which barely move in a few steps). The bound must be loose for
/// half precision: at initialisation a model's weight gradients are small residues of sums that
/// cancel (a batch's loss gradients nearly sum to zero, and batch norm's backward subtracts their
/// means), and ReLU masks and max-pool winners flip on values that round together, so rounding
/// of 2^-11 in the activations shows as several percent in the first steps (so in PyTorch's
/// autocast too). What it catches is plumbing: a loss scale not undone, a lost accumulation, a
/// weight read in the wrong layout -- errors of 50% and more.
inline void expect_same_steps(const ParameterValues& actual, const ParameterValues& expected,
                              const ParameterValues& start, double bound, const std::string& context = {}) {
  ASSERT_EQ(actual.size(), expected.size()) << context;
  for (const auto& [name, e] : expected) {
    const std::vector<float>& a = actual.at(name);
    const std::vector<float>& s = start.at(name);
    ASSERT_EQ(a.size(), e.size()) << context << " " << name;
    std::vector<float> expected_step(e.size());
    std::vector<float> actual_step(e.size());
    double moved = 0;
    for (std::size_t i = 0; i < e.size(); ++i) {
      expected_step[i] = e[i] - s[i];
      actual_step[i] = a[i] - s[i];
      moved = std::max(moved, static_cast<double>(std::abs(expected_step[i])));
    }
    if (moved == 0) {
      double magnitude = 0;
      double actual_moved = 0;
      for (std::size_t i = 0; i < e.size(); ++i) {
        magnitude = std::max(magnitude, static_cast<double>(std::abs(s[i])));
        actual_moved = std::max(actual_moved, static_cast<double>(std::abs(actual_step[i])));
      }
      EXPECT_LE(actual_moved, 4 * static_cast<double>(std::numeric_limits<float>::epsilon()) * magnitude)
          << context << " " << name << " did not move in the reference but did here";
      continue;
    }
    EXPECT_LE(relative_error(actual_step, expected_step), bound) << context << " " << name;
  }
}

}  // namespace stoke::nn::testing
