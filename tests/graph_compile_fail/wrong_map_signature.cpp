// Must NOT compile: a map stage's body must be callable with the item as an rvalue and return a
// value (MapBody). This one takes `int&` and returns void, so Flow<int>::map's constraint fails.
// Built only by the ctest test graph.concept_rejects_wrong_signature, which expects the error.
#include <optional>

#include "stoke/graph/pipeline.hpp"

int main() {
  stoke::graph::Pipeline pipeline;
  pipeline
      .source("count", [i = 0]() mutable -> std::optional<int> { return i < 10 ? std::optional(i++) : std::nullopt; })
      .map("increment", [](int& x) { ++x; })
      .sink("drop", [](int) {});
  return static_cast<int>(pipeline.run().consumed);
}
