#include "stoke/graph/decision.hpp"

#include <cstdio>
#include <ostream>

namespace stoke::graph {

const char* to_string(DecisionKind kind) noexcept {
  switch (kind) {
    case DecisionKind::grow:
      return "grow";
    case DecisionKind::shrink:
      return "shrink";
    case DecisionKind::grow_in_flight:
      return "grow-in-flight";
    case DecisionKind::shrink_in_flight:
      return "shrink-in-flight";
  }
  return "unknown";
}

void print(std::ostream& out, const Decision& d) {
  char when[32];
  std::snprintf(when, sizeof when, "%7.2f s  ", std::chrono::duration<double>(d.at).count());
  out << when << (d.stage.empty() ? std::string("in-flight") : d.stage) << ' ' << d.from << " -> " << d.to << ": "
      << d.why;
}

}  // namespace stoke::graph
