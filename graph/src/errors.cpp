#include "stoke/graph/errors.hpp"

#include <cstdio>
#include <utility>

namespace stoke::graph {

std::string describe(std::exception_ptr error) {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
  }
  return "unknown exception";
}

namespace {
std::string message(const std::string& stage, std::uint64_t index, const std::exception_ptr& cause) {
  std::string text = "stage '" + stage + "' failed";
  text += index == no_index ? std::string(" at the end of the stream") : " on item " + std::to_string(index);
  return text + ": " + describe(cause);
}
}  // namespace

StageError::StageError(std::string stage, std::uint64_t index, std::exception_ptr cause)
    : std::runtime_error(message(stage, index, cause)),
      stage_(std::move(stage)),
      index_(index),
      cause_(std::move(cause)) {}

namespace {
std::string stall_message(const std::string& item, double seconds, double limit_seconds) {
  char text[128];
  std::snprintf(text, sizeof text, "the call ran for %.1f s, past the stall limit of %.3g s", seconds, limit_seconds);
  return item.empty() ? std::string(text) : std::string(text) + " (item '" + item + "')";
}
}  // namespace

StallError::StallError(std::string stage, std::uint64_t index, std::string item, double seconds, double limit_seconds)
    : std::runtime_error(stall_message(item, seconds, limit_seconds)),
      stage_(std::move(stage)),
      index_(index),
      item_(std::move(item)) {}

}  // namespace stoke::graph
