// Per-item spans, written as Chrome trace JSON (the format Perfetto and chrome://tracing open).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
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

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}
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

  // Written next to the target and renamed over it, so a reader never sees half a file.
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    if (!out)
      throw std::runtime_error("cannot write trace '" + temporary + "': " + std::generic_category().message(errno));
    out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
    out << R"({"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"stoke pipeline"}})";
    std::set<int> threads;
    for (const auto& span : spans) threads.insert(span.thread);
    for (const int thread : threads)
      out << ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" << thread << ",\"args\":{\"name\":\"worker "
          << thread << "\"}}";
    char number[64];
    for (const auto& span : spans) {
      const std::string& name = span.stage >= 0 && static_cast<std::size_t>(span.stage) < stage_names.size()
                                    ? stage_names[static_cast<std::size_t>(span.stage)]
                                    : std::string("?");
      out << ",\n{\"name\":" << json_string(name)
          << ",\"cat\":\"stage\",\"ph\":\"X\",\"pid\":1,\"tid\":" << span.thread;
      std::snprintf(number, sizeof number, ",\"ts\":%.3f,\"dur\":%.3f",
                    static_cast<double>(ticks_to_ns(span.begin - started_ticks_)) / 1e3,
                    static_cast<double>(ticks_to_ns(span.end - span.begin)) / 1e3);
      out << number << ",\"args\":{\"index\":";
      if (span.index == no_index)
        out << "null";
      else
        out << span.index;
      out << "}}";
    }
    // The scheduler: its moves as instant events on a track of their own, and each setting as a
    // counter (Perfetto draws them as step charts under the process).
    {
      std::lock_guard lock(impl_->schedule_mutex);
      if (!impl_->settings.empty())
        out << ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"scheduler\"}}";
      for (const Decision& d : impl_->decisions) {
        std::snprintf(number, sizeof number, "%.3f", static_cast<double>(d.at.count()) / 1e3);
        const std::string what = (d.stage.empty() ? std::string("in-flight") : d.stage) + " " + std::to_string(d.from) +
                                 " -> " + std::to_string(d.to);
        out << ",\n{\"name\":" << json_string(what) << ",\"cat\":\"scheduler\",\"ph\":\"i\",\"s\":\"g\",\"pid\":1,"
            << "\"tid\":0,\"ts\":" << number << ",\"args\":{\"kind\":" << json_string(to_string(d.kind))
            << ",\"why\":" << json_string(d.why) << ",\"revert\":" << (d.revert ? "true" : "false") << "}}";
      }
      for (const Setting& setting : impl_->settings) {
        std::snprintf(number, sizeof number, "%.3f", static_cast<double>(setting.at_ns) / 1e3);
        const std::string name = setting.stage.empty() ? std::string("in-flight limit") : setting.stage + " calls";
        out << ",\n{\"name\":" << json_string(name) << ",\"cat\":\"scheduler\",\"ph\":\"C\",\"pid\":1,\"ts\":" << number
            << ",\"args\":{\"value\":" << setting.value << "}}";
      }
    }
    const std::size_t recorded = impl_->spans_recorded.load();
    out << "\n],\"otherData\":{\"spans_dropped\":"
        << (recorded > options_.max_trace_spans ? recorded - options_.max_trace_spans : 0) << "}}\n";
    if (!out.flush()) throw std::runtime_error("cannot write trace '" + temporary + "': write failed");
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot write trace '" + path + "': " + std::generic_category().message(errno));
}

}  // namespace stoke::graph::detail
