// CudaBackend's loss kernels (kernels.hpp): one block per row computes the row's loss in double
// and its gradient, then one block sums the rows in order (deterministic: no atomics).
#include <cstdint>

#include "kernel_utils.cuh"
#include "kernels.hpp"

namespace stoke::nn::cuda {
namespace {

template <class T>
__global__ void softmax_cross_entropy_kernel(const T* logits, const std::int32_t* labels, std::int64_t classes,
                                             float smoothing, float gradient_scale, float* row_stats, T* dlogits) {
  __shared__ double shared[kThreads / 32];
  __shared__ float best_value[kThreads];
  __shared__ std::int64_t best_index[kThreads];
  const std::int64_t row = blockIdx.x;
  const T* z = logits + row * classes;
  // The first maximum, as torch.argmax (and the CPU) pick it: ties go to the smaller index.
  float best = -INFINITY;
  std::int64_t best_at = -1;
  for (std::int64_t j = threadIdx.x; j < classes; j += kThreads) {
    const float v = load(z, j);
    if (best_at < 0 || v > best) {
      best = v;
      best_at = j;
    }
  }
  best_value[threadIdx.x] = best;
  best_index[threadIdx.x] = best_at;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride) {
      const float other = best_value[threadIdx.x + stride];
      const std::int64_t other_at = best_index[threadIdx.x + stride];
      const std::int64_t mine_at = best_index[threadIdx.x];
      if (other_at >= 0 && (mine_at < 0 || other > best_value[threadIdx.x] ||
                            (other == best_value[threadIdx.x] && other_at < mine_at))) {
        best_value[threadIdx.x] = other;
        best_index[threadIdx.x] = other_at;
      }
    }
    __syncthreads();
  }
  const float max = best_value[0];
  const std::int64_t arg_max = best_index[0];

  double sum_exp = 0;
  double sum_shifted = 0;  // sum_k (z_k - max)
  for (std::int64_t j = threadIdx.x; j < classes; j += kThreads) {
    const float shifted = load(z, j) - max;
    sum_exp += static_cast<double>(expf(shifted));
    sum_shifted += shifted;
  }
  sum_exp = block_sum(sum_exp, shared);
  sum_shifted = block_sum(sum_shifted, shared);
  const double log_sum = log(sum_exp);
  const std::int32_t label = labels[row];
  const bool bad_label = label < 0 || label >= classes;
  const double s = smoothing;
  const double off_target = s / static_cast<double>(classes);
  if (threadIdx.x == 0) {
    if (bad_label) {
      // No exception can leave a kernel: a NaN loss is the report (kernels.hpp).
      row_stats[2 * row] = NAN;
      row_stats[2 * row + 1] = 0;
    } else {
      const double log_p_label = (static_cast<double>(load(z, label)) - max) - log_sum;
      const double sum_log_p = sum_shifted - static_cast<double>(classes) * log_sum;
      row_stats[2 * row] = static_cast<float>(-(1 - s) * log_p_label - off_target * sum_log_p);
      row_stats[2 * row + 1] = arg_max == label ? 1.0f : 0.0f;
    }
  }
  if (dlogits == nullptr) return;
  T* grad = dlogits + row * classes;
  const auto log_sum_f = static_cast<float>(log_sum);
  for (std::int64_t j = threadIdx.x; j < classes; j += kThreads) {
    if (bad_label) {
      store(grad, j, NAN);
      continue;
    }
    const float p = expf((load(z, j) - max) - log_sum_f);
    const double target = off_target + (j == label ? 1 - s : 0.0);
    store(grad, j, static_cast<float>(static_cast<double>(gradient_scale) * (static_cast<double>(p) - target)));
  }
}

// torch.nn.BCEWithLogitsLoss's element loss and gradient (backend.hpp), in double as on the CPU;
// row_stats gets the row's mean loss and whether every prediction (x > 0) is its target (t > 0.5).
template <class T>
__global__ void binary_cross_entropy_kernel(const T* logits, const float* targets, const float* pos_weight,
                                            std::int64_t classes, double gradient_scale, float* row_stats, T* dlogits) {
  __shared__ double shared[kThreads / 32];
  const std::int64_t row = blockIdx.x;
  const T* z = logits + row * classes;
  const float* t = targets + row * classes;
  double loss = 0;
  double wrong = 0;
  for (std::int64_t j = threadIdx.x; j < classes; j += kThreads) {
    const double x = load(z, j);
    const double target = t[j];
    const double log_weight = 1 + ((pos_weight != nullptr ? static_cast<double>(pos_weight[j]) : 1.0) - 1) * target;
    const double minus_x_or_zero = -x < 0.0 ? 0.0 : -x;  // std::max(-x, 0.0), as the CPU has it
    loss += (1 - target) * x + log_weight * (log1p(exp(-fabs(x))) + minus_x_or_zero);
    if ((x > 0) != (target > 0.5)) wrong += 1;
    if (dlogits != nullptr) {
      const double sigmoid_of_minus = x >= 0 ? exp(-x) / (1 + exp(-x)) : 1 / (1 + exp(x));
      store(dlogits + row * classes, j,
            static_cast<float>(gradient_scale * ((1 - target) - log_weight * sigmoid_of_minus)));
    }
  }
  loss = block_sum(loss, shared);
  wrong = block_sum(wrong, shared);
  if (threadIdx.x == 0) {
    row_stats[2 * row] = static_cast<float>(loss / static_cast<double>(classes));
    row_stats[2 * row + 1] = wrong == 0 ? 1.0f : 0.0f;
  }
}

__global__ void mean_loss_kernel(const float* row_stats, std::int64_t rows, float* stats) {
  __shared__ double shared[kThreads / 32];
  double loss = 0;
  double correct = 0;
  for (std::int64_t r = threadIdx.x; r < rows; r += kThreads) {
    loss += row_stats[2 * r];
    correct += row_stats[2 * r + 1];
  }
  loss = block_sum(loss, shared);
  correct = block_sum(correct, shared);
  if (threadIdx.x == 0) {
    stats[0] = rows > 0 ? static_cast<float>(loss / static_cast<double>(rows)) : 0.0f;
    stats[1] = static_cast<float>(correct);
  }
}

}  // namespace

void softmax_cross_entropy(DType dtype, const void* logits, const std::int32_t* labels, std::int64_t rows,
                           std::int64_t classes, float smoothing, float grad_scale, float* row_stats, float* stats,
                           void* dlogits, Stream stream) {
  const float gradient_scale = rows > 0 ? grad_scale / static_cast<float>(rows) : 0.0f;
  if (rows > 0) {
    dispatch(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      softmax_cross_entropy_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
          static_cast<const T*>(logits), labels, classes, smoothing, gradient_scale, row_stats,
          static_cast<T*>(dlogits));
    });
    check_launch();
  }
  mean_loss_kernel<<<1, kThreads, 0, stream>>>(row_stats, rows, stats);
  check_launch();
}

void binary_cross_entropy_with_logits(DType dtype, const void* logits, const float* targets, const float* pos_weight,
                                      std::int64_t rows, std::int64_t classes, float grad_scale, float* row_stats,
                                      float* stats, void* dlogits, Stream stream) {
  const double elements = static_cast<double>(rows) * static_cast<double>(classes);
  const double gradient_scale = elements > 0 ? static_cast<double>(grad_scale) / elements : 0.0;
  if (rows > 0 && classes > 0) {
    dispatch(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      binary_cross_entropy_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
          static_cast<const T*>(logits), targets, pos_weight, classes, gradient_scale, row_stats,
          static_cast<T*>(dlogits));
    });
    check_launch();
  }
  mean_loss_kernel<<<1, kThreads, 0, stream>>>(row_stats, rows, stats);
  check_launch();
}

}  // namespace stoke::nn::cuda
