// CpuBackend's losses, with the mean over the batch, per row in double, rows in parallel; the
// rows' losses are summed afterwards in row order, so the result does not depend on how oneTBB
// split the rows.
//
// Softmax cross-entropy, torch.nn.CrossEntropyLoss(label_smoothing=s), with the row's maximum
// subtracted before exp so no logit overflows:
//   log p_k = z_k - max - log(sum_j exp(z_j - max))
//   loss    = -(1 - s) log p_label - (s / K) sum_k log p_k
//   dloss/dz_k = p_k - (1 - s) [k == label] - s / K
//
// Binary cross-entropy with logits, torch.nn.BCEWithLogitsLoss(pos_weight=w), the mean over all
// elements, with softplus(-x) = log1p(exp(-|x|)) + max(-x, 0) finite for every x:
//   loss = (1 - t) x + (1 + (w - 1) t) softplus(-x)
//   dloss/dx = (1 - t) - (1 + (w - 1) t) sigmoid(-x)
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
namespace {

// What every loss kernel requires of its logits {N, K}, stats {2} and dlogits (none or {N, K}).
void require_loss_tensors(const std::string& kernel, const Tensor& logits, const Tensor& stats, const Tensor& dlogits) {
  require_cpu_f32(logits, (kernel + "'s logits").c_str());
  require_cpu_f32(stats, (kernel + "'s stats").c_str());
  if (logits.rank() != 2) {
    throw std::invalid_argument("CpuBackend::" + kernel + ": logits are " + to_string(logits.shape()) +
                                ", expected {N, K}");
  }
  if (stats.numel() != 2) {
    throw std::invalid_argument("CpuBackend::" + kernel + ": stats is " + to_string(stats.shape()) + ", expected [2]");
  }
  if (dlogits.defined()) {
    require_cpu_f32(dlogits, (kernel + "'s dlogits").c_str());
    if (dlogits.shape() != logits.shape()) {
      throw std::invalid_argument("CpuBackend::" + kernel + ": dlogits is " + to_string(dlogits.shape()) +
                                  ", expected " + to_string(logits.shape()));
    }
  }
}

// stats = {the mean of the rows' losses, the rows counted correct}, summed in row order.
void write_stats(const std::vector<double>& row_loss, const std::vector<unsigned char>& row_correct,
                 const Tensor& stats) {
  const auto n = static_cast<std::int64_t>(row_loss.size());
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

// 1 / (1 + exp(x)), without overflow for either sign of x.
double sigmoid_of_minus(double x) {
  if (x >= 0) {
    const double e = std::exp(-x);
    return e / (1 + e);
  }
  return 1 / (1 + std::exp(x));
}

}  // namespace

void CpuBackend::softmax_cross_entropy(const Tensor& logits, const Tensor& labels, float smoothing, float grad_scale,
                                       const Tensor& stats, const Tensor& dlogits) {
  require_loss_tensors("softmax_cross_entropy", logits, stats, dlogits);
  const std::int64_t n = logits.dim(0);
  const std::int64_t k = logits.dim(1);
  if (!labels.device().is_cpu() || labels.dtype() != DType::i32 || labels.shape() != Shape{n}) {
    throw std::invalid_argument("CpuBackend::softmax_cross_entropy: labels are " + labels.describe() +
                                ", expected i32[" + std::to_string(n) + "] on the CPU");
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

  write_stats(row_loss, row_correct, stats);
}

void CpuBackend::binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets, const Tensor& pos_weight,
                                                  float grad_scale, const Tensor& stats, const Tensor& dlogits) {
  constexpr const char* kernel = "CpuBackend::binary_cross_entropy_with_logits: ";
  require_loss_tensors("binary_cross_entropy_with_logits", logits, stats, dlogits);
  require_cpu_f32(targets, "binary_cross_entropy_with_logits's targets");
  const std::int64_t n = logits.dim(0);
  const std::int64_t k = logits.dim(1);
  if (targets.shape() != logits.shape()) {
    throw std::invalid_argument(kernel + std::string("targets are ") + to_string(targets.shape()) + ", expected " +
                                to_string(logits.shape()));
  }
  if (pos_weight.defined()) {
    require_cpu_f32(pos_weight, "binary_cross_entropy_with_logits's pos_weight");
    if (pos_weight.shape() != Shape{k}) {
      throw std::invalid_argument(kernel + std::string("pos_weight is ") + to_string(pos_weight.shape()) +
                                  ", expected [" + std::to_string(k) + "]");
    }
  }

  const float* z = logits.data_as<const float>();
  const float* t = targets.data_as<const float>();
  const float* w = pos_weight.defined() ? pos_weight.data_as<const float>() : nullptr;
  float* dz = dlogits.defined() ? dlogits.data_as<float>() : nullptr;
  const double elements = static_cast<double>(n) * static_cast<double>(k);
  const double gradient_scale = elements > 0 ? static_cast<double>(grad_scale) / elements : 0.0;
  std::vector<double> row_loss(static_cast<std::size_t>(n));
  std::vector<unsigned char> row_correct(static_cast<std::size_t>(n));

  const std::int64_t grain = std::max<std::int64_t>(1, (1 << 14) / std::max<std::int64_t>(1, k));
  isolated_parallel_for(
      tbb::blocked_range<std::int64_t>(0, n, grain), [&](const tbb::blocked_range<std::int64_t>& rows) {
        for (std::int64_t i = rows.begin(); i < rows.end(); ++i) {
          double loss = 0;
          bool correct = true;
          for (std::int64_t j = i * k; j < (i + 1) * k; ++j) {
            const auto x = static_cast<double>(z[j]);
            const auto target = static_cast<double>(t[j]);
            const double log_weight = 1 + ((w != nullptr ? static_cast<double>(w[j - i * k]) : 1.0) - 1) * target;
            loss += (1 - target) * x + log_weight * (std::log1p(std::exp(-std::abs(x))) + std::max(-x, 0.0));
            correct = correct && (x > 0) == (target > 0.5);
            if (dz != nullptr)
              dz[j] = static_cast<float>(gradient_scale * ((1 - target) - log_weight * sigmoid_of_minus(x)));
          }
          row_loss[static_cast<std::size_t>(i)] = loss / static_cast<double>(k);
          row_correct[static_cast<std::size_t>(i)] = correct ? 1 : 0;
        }
      });

  write_stats(row_loss, row_correct, stats);
}

}  // namespace stoke::nn
