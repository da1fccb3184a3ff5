// Per-item spans, written as Chrome trace JSON (the format Perfetto and chrome://tracing open).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <stdexcept>
#include <system_error>

#include "runtime_impl.hpp"
#include "stoke/graph/detail/clock.hpp"

namespace stoke::graph::detail {

namespace {
int thread_number() {
  static std::atomic<int> next{1};
  thread_local const int number = next.fetch_add(1);
  return number;
}

// Microseconds from nanoseconds, to the nanosecond (Chrome's "ts" and "dur" are in us).
double microseconds(std::int64_t ns) { return std::round(static_cast<double>(ns)) / 1e3; }

// One event per line, each dumped by itself so that the file is written as it is built: a trace
// may hold millions of spans.
void write_event(std::ostream& out, const nlohmann::ordered_json& event) { out << ",\n" << event.dump(); }
}  // namespace

void Runtime::record_span(int stage, std::uint64_t index, std::int64_t begin, std::int64_t end) {
  if (impl_->spans_recorded.fetch_add(1, std::memory_order_relaxed) >= options_.max_trace_spans) return;
  impl_->spans.local().push_back(Span{stage, thread_number(), index, begin, end});
}

void Runtime::record_decision(const Decision& decision) {
  std::lock_guard lock(impl_->schedule_mutex);
  impl_->decisions.push_back(decision);
  impl_->settings.push_back(Setting{decision.stage, decision.to, decision.at.count()});
}

void Runtime::record_setting(std::string stage, std::size_t value, std::int64_t at_ns) {
  std::lock_guard lock(impl_->schedule_mutex);
  impl_->settings.push_back(Setting{std::move(stage), value, at_ns});
}

void Runtime::write_trace(const std::string& path, const std::vector<std::string>& stage_names) const {
  std::vector<Span> spans;
  for (const auto& local : impl_->spans) spans.insert(spans.end(), local.begin(), local.end());
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });

  // Written next to the target and renamed over it, so a reader never sees half a file, and a
  // failed write (a full disk) leaves the previous trace as it was and no temporary behind.
  const std::string temporary = path + ".tmp";
  const auto failed = [&](const std::string& why) {
    std::remove(temporary.c_str());
    return std::runtime_error("cannot write trace '" + path + "' (through '" + temporary + "'): " + why +
                              "; the file at that path, if any, is unchanged");
  };
  {
    std::ofstream out(temporary, std::ios::trunc);
    if (!out) throw failed(std::generic_category().message(errno));
    using json = nlohmann::ordered_json;
    out << R"({"displayTimeUnit":"ms","traceEvents":[)" << '\n';
    out << json{{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", "stoke pipeline"}}}}
               .dump();
    std::set<int> threads;
    for (const auto& span : spans) threads.insert(span.thread);
    for (const int thread : threads) {
      write_event(out, {{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", 1},
                        {"tid", thread},
                        {"args", {{"name", "worker " + std::to_string(thread)}}}});
    }
    for (const auto& span : spans) {
      const std::string& name = span.stage >= 0 && static_cast<std::size_t>(span.stage) < stage_names.size()
                                    ? stage_names[static_cast<std::size_t>(span.stage)]
                                    : std::string("?");
      write_event(out, {{"name", name},
                        {"cat", "stage"},
                        {"ph", "X"},
                        {"pid", 1},
                        {"tid", span.thread},
                        {"ts", microseconds(ticks_to_ns(span.begin - started_ticks_))},
                        {"dur", microseconds(ticks_to_ns(span.end - span.begin))},
                        {"args", {{"index", span.index == no_index ? json(nullptr) : json(span.index)}}}});
    }
    // The scheduler: its moves as instant events on a track of their own, and each setting as a
    // counter (Perfetto draws them as step charts under the process).
    {
      std::lock_guard lock(impl_->schedule_mutex);
      if (!impl_->settings.empty()) {
        write_event(out,
                    {{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", "scheduler"}}}});
      }
      for (const Decision& d : impl_->decisions) {
        const std::string what = (d.stage.empty() ? std::string("in-flight") : d.stage) + " " + std::to_string(d.from) +
                                 " -> " + std::to_string(d.to);
        write_event(out, {{"name", what},
                          {"cat", "scheduler"},
                          {"ph", "i"},
                          {"s", "g"},
                          {"pid", 1},
                          {"tid", 0},
                          {"ts", microseconds(d.at.count())},
                          {"args", {{"kind", to_string(d.kind)}, {"why", d.why}, {"revert", d.revert}}}});
      }
      for (const Setting& setting : impl_->settings) {
        const std::string name = setting.stage.empty() ? std::string("in-flight limit") : setting.stage + " calls";
        write_event(out, {{"name", name},
                          {"cat", "scheduler"},
                          {"ph", "C"},
                          {"pid", 1},
                          {"ts", microseconds(setting.at_ns)},
                          {"args", {{"value", setting.value}}}});
      }
    }
    const std::size_t recorded = impl_->spans_recorded.load();
    const std::size_t dropped = recorded > options_.max_trace_spans ? recorded - options_.max_trace_spans : 0;
    out << "\n],\"otherData\":" << json{{"spans_dropped", dropped}}.dump() << "}\n";
    out.close();  // flushes: a full disk shows here at the latest
    if (!out) throw failed(errno != 0 ? std::generic_category().message(errno) : std::string("write failed"));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) throw failed(std::generic_category().message(errno));
}

}  // namespace stoke::graph::detail
