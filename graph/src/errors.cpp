#include "stoke/graph/errors.hpp"

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

}  // namespace stoke::graph
