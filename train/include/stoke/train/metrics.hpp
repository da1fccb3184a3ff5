// Classification metrics on a batch's logits: top-k correct counts, with the logits and labels
// copied to the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/tensor.hpp>
#include <vector>

namespace stoke::train {

/// A batch's logits {N, classes} and labels {N} copied to the host, for metrics.
struct HostScores {
  std::vector<float> scores;  ///< row-major, N x classes
  std::vector<std::int32_t> labels;
  std::size_t classes = 0;
  std::span<const float> row(std::size_t i) const { return {scores.data() + i * classes, classes}; }
};
/// Copies them (any device, f32/bf16/f16 logits); waits for the backend's stream.
HostScores to_host(const nn::Tensor& logits, const nn::Tensor& labels, nn::Backend& backend);

/// Whether `label` is among the k largest of `row`: fewer than k classes score strictly higher
/// (ties favour the label, as with the loss's top-1 count).
bool in_top_k(std::span<const float> row, std::int32_t label, int k);

/// How many of the rows of `logits` {N, classes} (any device, f32/bf16/f16) have their label among
/// the k largest logits. Waits for the backend's stream.
std::int64_t top_k_correct(const nn::Tensor& logits, const nn::Tensor& labels, int k, nn::Backend& backend);

}  // namespace stoke::train
