// CpuBackend's softmax cross-entropy, torch.nn.CrossEntropyLoss(label_smoothing=s) with the mean
// over the batch. Per row, in double, with the row's maximum subtracted before exp so no logit
// overflows:
//   log p_k = z_k - max - log(sum_j exp(z_j - max))
//   loss    = -(1 - s) log p_label - (s / K) sum_k log p_k
//   dloss/dz_k = p_k - (1 - s) [k == label] - s / K
// Rows run in parallel; their losses are summed afterwards in row order, so the result does not
// depend on how oneTBB split the rows.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu_backend.hpp"

namespace stoke::nn {

void CpuBackend::softmax_cross_entropy(const Tensor& logits, const Tensor& labels, float smoothing, float grad_scale,
                                       const Tensor& stats, const Tensor& dlogits) {
  require_cpu_f32(logits, "softmax_cross_entropy's logits");
  require_cpu_f32(stats, "softmax_cross_entropy's stats");
  if (logits.rank() != 2) {
    throw std::invalid_argument("CpuBackend::softmax_cross_entropy: logits are " + to_string(logits.shape()) +
                                ", expected {N, K}");
  }
  const std::int64_t n = logits.dim(0);
  const std::int64_t k = logits.dim(1);
  if (!labels.device().is_cpu() || labels.dtype() != DType::i32 || labels.shape() != Shape{n}) {
    throw std::invalid_argument("CpuBackend::softmax_cross_entropy: labels are " + labels.describe() +
                                ", expected i32[" + std::to_string(n) + "] on the CPU");
  }
  if (stats.numel() != 2) {
    throw std::invalid_argument("CpuBackend::softmax_cross_entropy: stats is " + to_string(stats.shape()) +
                                ", expected [2]");
  }
  if (dlogits.defined()) {
    require_cpu_f32(dlogits, "softmax_cross_entropy's dlogits");
    if (dlogits.shape() != logits.shape()) {
      throw std::invalid_argument("CpuBackend::softmax_cross_entropy: dlogits is " + to_string(dlogits.shape()) +
                                  ", expected " + to_string(logits.shape()));
    }
  }
  const std::int32_t* label = labels.data_as<const std::int32_t>();
  // Every label is checked before anything is written.
  for (std::int64_t i = 0; i < n; ++i) {
    if (label[i] < 0 || label[i] >= k) {
      throw std::out_of_range("softmax_cross_entropy: row " + std::to_string(i) + " has label " +
                              std::to_string(label[i]) + ", outside [0, K) for K = " + std::to_string(k) + " classes");
    }
  }

  const float* z = logits.data_as<const float>();
  float* dz = dlogits.defined() ? dlogits.data_as<float>() : nullptr;
  const auto s = static_cast<double>(smoothing);
  const double off_target = s / static_cast<double>(k);  // the smoothed target of every class
  const double gradient_scale = n > 0 ? static_cast<double>(grad_scale) / static_cast<double>(n) : 0.0;
  std::vector<double> row_loss(static_cast<std::size_t>(n));
  std::vector<unsigned char> row_correct(static_cast<std::size_t>(n));

  const std::int64_t grain = std::max<std::int64_t>(1, (1 << 14) / std::max<std::int64_t>(1, k));
  isolated_parallel_for(tbb::blocked_range<std::int64_t>(0, n, grain),
                        [&](const tbb::blocked_range<std::int64_t>& rows) {
                          for (std::int64_t i = rows.begin(); i < rows.end(); ++i) {
                            const float* row = z + i * k;
                            // The first maximum, as torch.argmax picks it.
                            const std::int64_t arg_max = std::max_element(row, row + k) - row;
                            const auto max = static_cast<double>(row[arg_max]);
                            double sum_exp = 0;
                            double sum_shifted = 0;  // sum_k (z_k - max)
                            for (std::int64_t j = 0; j < k; ++j) {
                              const double shifted = static_cast<double>(row[j]) - max;
                              sum_exp += std::exp(shifted);
                              sum_shifted += shifted;
                            }
                            const double log_sum = std::log(sum_exp);
                            const double log_p_label = (static_cast<double>(row[label[i]]) - max) - log_sum;
                            const double sum_log_p = sum_shifted - static_cast<double>(k) * log_sum;
                            row_loss[static_cast<std::size_t>(i)] = -(1 - s) * log_p_label - off_target * sum_log_p;
                            row_correct[static_cast<std::size_t>(i)] = arg_max == label[i] ? 1 : 0;
                            if (dz == nullptr) continue;
                            float* grad = dz + i * k;
                            for (std::int64_t j = 0; j < k; ++j) {
                              const double p = std::exp((static_cast<double>(row[j]) - max) - log_sum);
                              const double target = off_target + (j == label[i] ? 1 - s : 0.0);
                              grad[j] = static_cast<float>(gradient_scale * (p - target));
                            }
                          }
                        });

  double total = 0;
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    total += row_loss[static_cast<std::size_t>(i)];
    correct += row_correct[static_cast<std::size_t>(i)];
  }
  float* out = stats.data_as<float>();
  out[0] = n > 0 ? static_cast<float>(total / static_cast<double>(n)) : 0.0f;
  out[1] = static_cast<float>(correct);
}

}  // namespace stoke::nn
