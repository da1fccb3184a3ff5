// Decision: one move of the scheduler (stoke::graph::Autotuner), with its reason. Decisions are
// passed to AutotuneOptions::on_decision as they are made, listed in RunReport::decisions and
// drawn in the Chrome trace.
#pragma once

#include <chrono>
#include <cstddef>
#include <iosfwd>
#include <string>

namespace stoke::graph {

enum class DecisionKind {
  grow,            ///< a stage gets one more concurrent call
  shrink,          ///< a stage gives one back
  grow_in_flight,  ///< more items (and so batches) in flight: a deeper prefetch
  shrink_in_flight,
};
const char* to_string(DecisionKind kind) noexcept;

/// One move, with its reason. `stage` is empty for the in-flight limit.
struct Decision {
  DecisionKind kind = DecisionKind::grow;
  std::string stage;
  std::size_t from = 0;
  std::size_t to = 0;
  std::string why;
  std::chrono::nanoseconds at{0};  ///< when it was made, from the start of the run
  bool revert = false;             ///< undoes an earlier move that bought nothing
};

/// One log line: "  1.40 s  decode 2 -> 3: <why>" (the in-flight limit reads "in-flight").
void print(std::ostream& out, const Decision& decision);

}  // namespace stoke::graph
