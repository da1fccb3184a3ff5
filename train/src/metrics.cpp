#include "stoke/train/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>

namespace stoke::train {

bool in_top_k(std::span<const float> row, std::int32_t label, int k) {
  // Unlabelled items (-1: `stoke classify`'s) and labels past the model's classes are in no top k.
  if (label < 0 || static_cast<std::size_t>(label) >= row.size()) return false;
  const float mine = row[static_cast<std::size_t>(label)];
  return std::count_if(row.begin(), row.end(), [&](float v) { return v > mine; }) < k;
}

std::size_t argmax(std::span<const float> row) {
  return row.empty() ? 0 : static_cast<std::size_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

std::vector<std::size_t> top_classes(std::span<const float> row, std::size_t k) {
  std::vector<std::size_t> order(row.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  const auto top = static_cast<std::ptrdiff_t>(std::min(k, row.size()));
  std::partial_sort(order.begin(), order.begin() + top, order.end(),
                    [&](std::size_t a, std::size_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  order.resize(static_cast<std::size_t>(top));
  return order;
}

std::vector<float> softmax_rows(std::span<const float> logits, std::size_t classes) {
  if (classes == 0 || logits.size() % classes != 0) {
    throw std::invalid_argument("softmax_rows: " + std::to_string(logits.size()) + " logits are not rows of " +
                                std::to_string(classes) + " classes");
  }
  std::vector<float> out(logits.size());
  for (std::size_t r = 0; r < logits.size(); r += classes) {
    const float* row = logits.data() + r;
    const float top = *std::max_element(row, row + classes);
    double sum = 0;
    for (std::size_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(row[c] - top));
    for (std::size_t c = 0; c < classes; ++c) {
      out[r + c] = static_cast<float>(std::exp(static_cast<double>(row[c] - top)) / sum);
    }
  }
  return out;
}

ConfusionMatrix::ConfusionMatrix(std::size_t classes) : rows_(classes, std::vector<std::uint64_t>(classes, 0)) {}

void ConfusionMatrix::add(std::size_t truth, std::size_t predicted) {
  if (truth >= classes() || predicted >= classes()) {
    throw std::out_of_range("confusion matrix: class " + std::to_string(std::max(truth, predicted)) +
                            " is outside the " + std::to_string(classes()) + " classes");
  }
  ++rows_[truth][predicted];
}

std::uint64_t ConfusionMatrix::row_total(std::size_t truth) const {
  const std::vector<std::uint64_t>& row = rows_.at(truth);
  return std::accumulate(row.begin(), row.end(), std::uint64_t{0});
}

std::uint64_t ConfusionMatrix::total() const {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < classes(); ++i) n += row_total(i);
  return n;
}

std::uint64_t ConfusionMatrix::correct() const {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < classes(); ++i) n += rows_[i][i];
  return n;
}

double ConfusionMatrix::accuracy() const {
  const std::uint64_t n = total();
  return n > 0 ? static_cast<double>(correct()) / static_cast<double>(n) : 0;
}

std::size_t ConfusionMatrix::pair_count() const {
  std::size_t n = 0;
  for (std::size_t i = 0; i < classes(); ++i) {
    for (std::size_t j = 0; j < classes(); ++j) n += i != j && rows_[i][j] > 0 ? 1 : 0;
  }
  return n;
}

std::vector<ConfusionMatrix::Pair> ConfusionMatrix::most_confused(std::size_t limit) const {
  std::vector<Pair> pairs;
  for (std::size_t i = 0; i < classes(); ++i) {
    for (std::size_t j = 0; j < classes(); ++j) {
      if (i == j || rows_[i][j] == 0) continue;
      pairs.push_back({.truth = i,
                       .predicted = j,
                       .count = rows_[i][j],
                       .share = static_cast<double>(rows_[i][j]) / static_cast<double>(row_total(i))});
    }
  }
  std::sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) {
    if (a.count != b.count) return a.count > b.count;
    return std::tie(a.truth, a.predicted) < std::tie(b.truth, b.predicted);
  });
  if (pairs.size() > limit) pairs.resize(limit);
  return pairs;
}

}  // namespace stoke::train
