// Classification metrics: a batch's logits and labels on the host, top-k counts, the top classes
// of a row, softmax probabilities, and a confusion matrix. Plain values: no graph, no device state
// beyond to_host's copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/tensor.hpp>
#include <vector>

namespace stoke::train {

/// Whether `label` is among the k largest of `row`: fewer than k classes score strictly higher
/// (ties favour the label, as with the loss's top-1 count).
bool in_top_k(std::span<const float> row, std::int32_t label, int k);

/// The class with the largest score (the first of equal ones); 0 for an empty row.
std::size_t argmax(std::span<const float> row);

/// The `k` (at most the row's size) classes with the largest scores, largest first; equal scores
/// in class order.
std::vector<std::size_t> top_classes(std::span<const float> row, std::size_t k);

/// The softmax of each row of `logits` (row-major, `classes` per row), computed in double for
/// the exponentials. Throws std::invalid_argument when classes is 0 or does not divide the size.
std::vector<float> softmax_rows(std::span<const float> logits, std::size_t classes);

/// Counts of (true class, predicted class) over a dataset: rows are true classes, columns
/// predictions. Not thread-safe; fill it from one thread (run_epoch's sink is serial).
class ConfusionMatrix {
 public:
  /// An empty matrix of `classes` x `classes`.
  explicit ConfusionMatrix(std::size_t classes = 0);

  /// Counts one image. Throws std::out_of_range when either class is not below classes().
  void add(std::size_t truth, std::size_t predicted);

  std::size_t classes() const noexcept { return rows_.size(); }
  std::uint64_t at(std::size_t truth, std::size_t predicted) const { return rows_.at(truth).at(predicted); }
  /// The rows, for printing: rows()[truth][predicted].
  const std::vector<std::vector<std::uint64_t>>& rows() const noexcept { return rows_; }
  /// Images of class `truth`.
  std::uint64_t row_total(std::size_t truth) const;
  /// Images counted.
  std::uint64_t total() const;
  /// Images predicted as their own class (the diagonal).
  std::uint64_t correct() const;
  /// correct() / total(); 0 when empty.
  double accuracy() const;

  /// One off-diagonal cell: `count` images of class `truth` predicted as `predicted`, which is
  /// `share` (0..1) of the images of `truth`.
  struct Pair {
    std::size_t truth = 0;
    std::size_t predicted = 0;
    std::uint64_t count = 0;
    double share = 0;
  };
  /// The non-empty off-diagonal cells, most images first, equal counts in (truth, predicted)
  /// order. pair_count() of them in all; `limit` caps the list.
  std::vector<Pair> most_confused(std::size_t limit) const;
  /// How many off-diagonal cells are non-empty.
  std::size_t pair_count() const;

 private:
  std::vector<std::vector<std::uint64_t>> rows_;
};

}  // namespace stoke::train
