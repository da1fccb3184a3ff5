#include "stoke/graph/stats.hpp"

#include <cstdio>
#include <ostream>

namespace stoke::graph {

const char* to_string(StageKind kind) noexcept {
  switch (kind) {
    case StageKind::source:
      return "source";
    case StageKind::map:
      return "map";
    case StageKind::filter:
      return "filter";
    case StageKind::emit:
      return "emit";
    case StageKind::async:
      return "async";
    case StageKind::sink:
      return "sink";
    case StageKind::fan_out:
      return "fan-out";
    case StageKind::join:
      return "join";
  }
  return "?";
}

std::string describe(const Stall& stall) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f s", std::chrono::duration<double>(stall.running).count());
  std::string text = "stage '" + stall.stage + "' " + (stall.returned ? "was" : "has been") + " on item " +
                     std::to_string(stall.index);
  if (!stall.item.empty()) text += " (" + stall.item + ")";
  return text + " for " + seconds;
}

void print(std::ostream& out, const RunReport& report) {
  const double seconds = std::chrono::duration<double>(report.elapsed).count();
  char line[256];
  std::snprintf(line, sizeof line, "%-16s %-6s %10s %10s %8s %8s %7s %7s %7s %5s %9s\n", "stage", "kind", "in", "out",
                "dropped", "skipped", "busy%", "starv%", "block%", "conc", "queue");
  out << line;
  for (const auto& s : report.stages) {
    auto percent = [&](std::chrono::nanoseconds t, int over) {
      return seconds > 0 ? 100.0 * std::chrono::duration<double>(t).count() / (seconds * over) : 0.0;
    };
    std::snprintf(line, sizeof line, "%-16.16s %-6s %10llu %10llu %8llu %8llu %7.1f %7.1f %7.1f %2d/%-2d %4zu/%-4zu\n",
                  s.name.c_str(), to_string(s.kind), static_cast<unsigned long long>(s.items_in),
                  static_cast<unsigned long long>(s.items_out), static_cast<unsigned long long>(s.dropped),
                  static_cast<unsigned long long>(s.skipped), percent(s.busy, s.concurrency), percent(s.starved, 1),
                  percent(s.blocked, 1), s.concurrency, s.max_concurrency, s.peak_queued, s.capacity);
    out << line;
  }
  std::snprintf(line, sizeof line, "%llu produced, %llu consumed, %llu skipped in %.3f s%s%s\n",
                static_cast<unsigned long long>(report.produced), static_cast<unsigned long long>(report.consumed),
                static_cast<unsigned long long>(report.skipped), seconds, report.stopped ? " (stopped)" : "",
                report.cancelled ? " (cancelled)" : "");
  out << line;
  if (!report.decisions.empty()) {
    out << "scheduler: " << report.decisions.size() << " move" << (report.decisions.size() == 1 ? "" : "s")
        << ", in-flight limit " << report.max_in_flight << " at the end\n";
    for (const Decision& d : report.decisions) {
      print(out << "  ", d);
      out << '\n';
    }
  }
  for (const Stall& stall : report.stalls) out << "  stalled: " << describe(stall) << '\n';
  for (const auto& skip : report.skipped_items)
    out << "  skipped item " << skip.index << " in '" << skip.stage << "': " << skip.reason << '\n';
}

}  // namespace stoke::graph
