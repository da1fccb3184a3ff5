#include "stoke/train/metrics.hpp"

#include <algorithm>
#include <stdexcept>

namespace stoke::train {

HostScores to_host(const nn::Tensor& logits, const nn::Tensor& labels, nn::Backend& backend) {
  if (logits.rank() != 2 || labels.numel() != logits.dim(0)) {
    throw std::invalid_argument("logits " + logits.describe() + " do not match labels " + labels.describe());
  }
  HostScores out{.scores = logits.to_vector(backend.stream()),
                 .labels = std::vector<std::int32_t>(static_cast<std::size_t>(labels.numel())),
                 .classes = static_cast<std::size_t>(logits.dim(1))};
  const nn::Tensor host = nn::Tensor::view_of(out.labels.data(), labels.shape(), gpu::DType::i32);
  host.copy_from(labels, backend.stream());
  backend.stream().synchronize();
  return out;
}

bool in_top_k(std::span<const float> row, std::int32_t label, int k) {
  const float mine = row[static_cast<std::size_t>(label)];
  return std::count_if(row.begin(), row.end(), [&](float v) { return v > mine; }) < k;
}

std::int64_t top_k_correct(const nn::Tensor& logits, const nn::Tensor& labels, int k, nn::Backend& backend) {
  const HostScores host = to_host(logits, labels, backend);
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < host.labels.size(); ++i) correct += in_top_k(host.row(i), host.labels[i], k) ? 1 : 0;
  return correct;
}

}  // namespace stoke::train
