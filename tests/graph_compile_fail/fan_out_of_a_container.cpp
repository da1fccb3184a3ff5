// Must NOT compile: fan_out would copy a std::vector into every branch but the last, a copy the
// graph refuses to make silently (fan_out_copies). Built only by the ctest test
// graph.fan_out_refuses_a_silent_copy, which expects the static_assert's advice.
#include <optional>
#include <vector>

#include "stoke/graph/pipeline.hpp"

int main() {
  stoke::graph::Pipeline pipeline;
  auto [a, b] = pipeline
                    .source("rows", [i = 0]() mutable -> std::optional<std::vector<int>> {
                      return i++ < 10 ? std::optional(std::vector<int>(100, i)) : std::nullopt;
                    })
                    .fan_out("split");
  std::move(a).sink("left", [](std::vector<int>) {});
  std::move(b).sink("right", [](std::vector<int>) {});
  return static_cast<int>(pipeline.run().consumed);
}
