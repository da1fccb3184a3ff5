// Errors thrown by Pipeline::run().
#pragma once

#include <cstdint>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>

namespace stoke::graph {

/// Index of "no particular item" (e.g. a failure in an emit stage's flush()).
inline constexpr std::uint64_t no_index = std::numeric_limits<std::uint64_t>::max();

/// A stage's body threw under OnError::fail. what() reads
/// "stage 'decode' failed on item 17: <the original message>"; cause() is the original exception.
class StageError : public std::runtime_error {
 public:
  StageError(std::string stage, std::uint64_t index, std::exception_ptr cause);

  const std::string& stage() const noexcept { return stage_; }
  /// Source index of the item (its position in the source's stream), or no_index.
  std::uint64_t index() const noexcept { return index_; }
  std::exception_ptr cause() const noexcept { return cause_; }

 private:
  std::string stage_;
  std::uint64_t index_;
  std::exception_ptr cause_;
};

/// Why a run under OnStall::fail was failed: the cause() of the StageError Pipeline::run() throws.
/// what() reads "the call ran for 12.0 s, past the stall limit of 10 s (item 'photos/a.jpg')".
class StallError : public std::runtime_error {
 public:
  StallError(std::string stage, std::uint64_t index, std::string item, double seconds, double limit_seconds);

  const std::string& stage() const noexcept { return stage_; }
  std::uint64_t index() const noexcept { return index_; }
  /// StallOptions::item_name(index), or empty.
  const std::string& item() const noexcept { return item_; }

 private:
  std::string stage_;
  std::uint64_t index_;
  std::string item_;
};

/// Text of an exception_ptr's exception ("unknown exception" when it is not a std::exception).
std::string describe(std::exception_ptr error);

}  // namespace stoke::graph
