// Statistics and trace: per-stage counters agree with what the bodies did, snapshots can be
// taken while running, and the Chrome trace has one complete event per body call.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "stoke/graph/graph.hpp"
#include "test_support.hpp"

namespace stoke::graph::test {
namespace {

constexpr std::uint64_t kItems = 500;

auto counting_source(std::uint64_t count) {
  return [count, next = std::uint64_t{0}]() mutable -> std::optional<std::uint64_t> {
    if (next == count) return std::nullopt;
    return next++;
  };
}

/// source -> scale (map) -> drop_quarters (filter) -> repeat (emit, x % 3 copies) -> finish
/// (map) -> sink.
void build_mixed(Pipeline& pipe, std::uint64_t items, int work_us) {
  pipe.source("source", counting_source(items))
      .map("scale",
           [work_us](std::uint64_t x) {
             if (work_us > 0) sleep_us(work_us);
             return x;
           },
           {.concurrency = parallel(3)})
      .filter("drop_quarters",
              [](std::uint64_t x) -> std::optional<std::uint64_t> {
                if (x % 4 == 0) return std::nullopt;
                return x;
              },
              {.concurrency = parallel(2)})
      .emit<std::uint64_t>("repeat",
                           [](std::uint64_t x, Emitter<std::uint64_t>& out) {
                             for (std::uint64_t i = 0; i < x % 3; ++i) out.emit(x);
                           })
      .map("finish", [](std::uint64_t x) { return x + 1; })
      .sink("sink", [](std::uint64_t) {});
}

TEST(PipelineStatsTest, StatsAfterRunAgreeWithWhatEachStageDid) {
  Pipeline pipe({.max_in_flight = 32, .threads = 4});
  build_mixed(pipe, kItems, 10);
  const RunReport report = pipe.run();

  std::uint64_t kept = 0;
  std::uint64_t emitted = 0;
  std::uint64_t emitted_nothing = 0;
  for (std::uint64_t x = 0; x < kItems; ++x) {
    if (x % 4 == 0) continue;
    ++kept;
    emitted += x % 3;
    if (x % 3 == 0) ++emitted_nothing;
  }

  const std::vector<StageStats> stats = pipe.stats();
  ASSERT_EQ(stats.size(), 6u);
  const std::vector<std::string> names{"source", "scale", "drop_quarters", "repeat", "finish", "sink"};
  const std::vector<StageKind> kinds{StageKind::source, StageKind::map, StageKind::filter,
                                     StageKind::emit,   StageKind::map, StageKind::sink};
  EXPECT_EQ(pipe.stage_names(), names);
  for (std::size_t i = 0; i < stats.size(); ++i) {
    SCOPED_TRACE(stats[i].name);
    EXPECT_EQ(stats[i].name, names[i]);
    EXPECT_EQ(stats[i].kind, kinds[i]);
    EXPECT_EQ(stats[i].queued, 0u);
    EXPECT_EQ(stats[i].active, 0);
    EXPECT_GT(stats[i].busy.count(), 0);
    EXPECT_GE(stats[i].starved.count(), 0);
    EXPECT_GE(stats[i].blocked.count(), 0);
    if (i > 0) {
      EXPECT_EQ(stats[i].items_in, stats[i - 1].items_out) << "items_in must equal upstream's items_out";
    }
    if (stats[i].kind == StageKind::map || stats[i].kind == StageKind::filter) {
      EXPECT_EQ(stats[i].items_out, stats[i].items_in - stats[i].dropped - stats[i].skipped);
    }
  }

  EXPECT_EQ(stats[0].items_in, 0u);
  EXPECT_EQ(stats[0].items_out, kItems);
  EXPECT_EQ(stats[1].items_out, kItems);
  EXPECT_EQ(stats[2].dropped, kItems - kept);
  EXPECT_EQ(stats[2].items_out, kept);
  EXPECT_EQ(stats[3].items_out, emitted);
  EXPECT_EQ(stats[3].dropped, emitted_nothing) << "an emit call that emitted nothing counts as dropped";
  EXPECT_EQ(stats[4].items_out, emitted);
  EXPECT_EQ(stats[5].items_out, emitted) << "a sink's items_out is the items it consumed";

  EXPECT_EQ(stats[1].concurrency, 3);
  EXPECT_EQ(stats[1].max_concurrency, 3);
  EXPECT_EQ(stats[1].min_concurrency, 1);
  EXPECT_EQ(stats[1].capacity, 8u) << "default capacity is 2 * max concurrency + 2";

  EXPECT_EQ(report.produced, kItems);
  EXPECT_EQ(report.consumed, emitted);
  EXPECT_EQ(report.skipped, 0u);
  EXPECT_TRUE(report.skipped_items.empty());
  EXPECT_FALSE(report.stopped);
  EXPECT_FALSE(report.cancelled);
  EXPECT_GT(report.elapsed.count(), 0);

  ASSERT_EQ(report.stages.size(), stats.size());
  for (std::size_t i = 0; i < stats.size(); ++i) {
    SCOPED_TRACE(stats[i].name);
    EXPECT_EQ(report.stages[i].name, stats[i].name);
    EXPECT_EQ(report.stages[i].items_in, stats[i].items_in);
    EXPECT_EQ(report.stages[i].items_out, stats[i].items_out);
    EXPECT_EQ(report.stages[i].dropped, stats[i].dropped);
  }
}

TEST(PipelineStatsTest, StatsCanBeReadFromAnotherThreadWhileRunning) {
  Pipeline pipe({.max_in_flight = 32, .threads = 4});
  build_mixed(pipe, 2000, 20);
  const std::vector<std::string> names = pipe.stage_names();

  std::atomic<bool> finished{false};
  std::vector<std::string> problems;
  std::uint64_t snapshots = 0;
  std::thread reader([&] {
    std::vector<StageStats> previous;
    while (!finished.load()) {
      std::vector<StageStats> now = pipe.stats();
      ++snapshots;
      if (now.size() != names.size()) {
        problems.push_back("snapshot has " + std::to_string(now.size()) + " stages");
        break;
      }
      for (std::size_t i = 0; i < now.size(); ++i) {
        const StageStats& s = now[i];
        if (s.name != names[i]) problems.push_back("stage " + std::to_string(i) + " is named " + s.name);
        if (s.active < 0 || s.active > s.max_concurrency) {
          problems.push_back(s.name + ": active " + std::to_string(s.active) + " outside [0, max]");
        }
        if ((s.kind == StageKind::map || s.kind == StageKind::filter) &&
            s.items_out + s.dropped + s.skipped > s.items_in) {
          problems.push_back(s.name + ": more items out than in");
        }
        if (!previous.empty() &&
            (s.items_in < previous[i].items_in || s.items_out < previous[i].items_out || s.busy < previous[i].busy)) {
          problems.push_back(s.name + ": a counter went backwards");
        }
      }
      previous = std::move(now);
      if (problems.size() > 20) break;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  RunReport report;
  try {
    report = pipe.run();
  } catch (...) {
    finished = true;
    reader.join();
    throw;
  }
  finished = true;
  reader.join();

  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_GT(snapshots, 0u);
  EXPECT_EQ(report.produced, 2000u);
}

TEST(PipelineStatsTest, PrintedReportListsEveryStage) {
  Pipeline pipe({.threads = 2});
  build_mixed(pipe, 50, 0);
  const RunReport report = pipe.run();
  std::ostringstream out;
  print(out, report);
  for (const std::string& name : pipe.stage_names()) EXPECT_TRUE(contains(out.str(), name));
}

TEST(PipelineStatsTest, StageKindNamesAreReadable) {
  EXPECT_STREQ(to_string(StageKind::source), "source");
  EXPECT_STREQ(to_string(StageKind::map), "map");
  EXPECT_STREQ(to_string(StageKind::filter), "filter");
  EXPECT_STREQ(to_string(StageKind::emit), "emit");
  EXPECT_STREQ(to_string(StageKind::sink), "sink");
}

// ---- trace ------------------------------------------------------------------------------------

struct CallCounts {
  std::atomic<std::uint64_t> source{0};
  std::atomic<std::uint64_t> map{0};
  std::atomic<std::uint64_t> sink{0};
  std::uint64_t total() const { return source.load() + map.load() + sink.load(); }
};

void build_traced(Pipeline& pipe, CallCounts& calls, std::uint64_t items) {
  pipe.source("trace_source",
              [&calls, items, next = std::uint64_t{0}]() mutable -> std::optional<std::uint64_t> {
                ++calls.source;
                if (next == items) return std::nullopt;
                return next++;
              })
      .map("trace_map",
           [&calls](std::uint64_t x) {
             ++calls.map;
             sleep_us(10);
             return x;
           },
           {.concurrency = parallel(2)})
      .sink("trace_sink", [&calls](std::uint64_t) { ++calls.sink; });
}

TEST(PipelineTraceTest, TraceHasOneCompleteEventPerBodyCall) {
  constexpr std::uint64_t kTraced = 100;
  CallCounts calls;
  Pipeline pipe({.threads = 2, .trace = true});
  build_traced(pipe, calls, kTraced);
  pipe.run();
  ASSERT_EQ(calls.source.load(), kTraced + 1) << "the source is called once more to learn the stream ended";
  ASSERT_EQ(calls.map.load(), kTraced);
  ASSERT_EQ(calls.sink.load(), kTraced);

  TempPath file("trace");
  pipe.write_trace(file.path());
  const std::string json = read_text(file.path());
  EXPECT_TRUE(contains(json, "\"traceEvents\""));
  EXPECT_EQ(count_complete_events(json), calls.total());
}

TEST(PipelineTraceTest, TraceNamesEveryStage) {
  CallCounts calls;
  Pipeline pipe({.threads = 2, .trace = true});
  build_traced(pipe, calls, 20);
  pipe.run();
  TempPath file("trace_names");
  pipe.write_trace(file.path());
  const std::string json = read_text(file.path());
  for (const char* name : {"trace_source", "trace_map", "trace_sink"}) EXPECT_TRUE(contains(json, name));
}

TEST(PipelineTraceTest, MaxTraceSpansBoundsRecordedEvents) {
  CallCounts calls;
  Pipeline pipe({.threads = 2, .trace = true, .max_trace_spans = 10});
  build_traced(pipe, calls, 100);
  pipe.run();
  TempPath file("trace_bounded");
  pipe.write_trace(file.path());
  const std::size_t events = count_complete_events(read_text(file.path()));
  EXPECT_LE(events, 10u);
  EXPECT_GE(events, 1u);
}

TEST(PipelineTraceTest, WriteTraceToUnwritablePathThrowsRuntimeErrorNamingThePath) {
  CallCounts calls;
  Pipeline pipe({.threads = 2, .trace = true});
  build_traced(pipe, calls, 10);
  pipe.run();
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "stoke_no_such_dir" / "sub" / "t.json";
  try {
    pipe.write_trace(path);
    ADD_FAILURE() << "write_trace to " << path << " did not throw";
  } catch (const std::runtime_error& error) {
    EXPECT_TRUE(contains(error.what(), path.string()));
  }
}

// A full disk while the trace is written (RLIMIT_FSIZE caps this process's files, as a disk with
// that much room left would): an error naming the path and why, the previous trace at the path
// byte for byte as it was, and no temporary left behind.
TEST(PipelineTraceTest, AFullDiskLeavesThePreviousTraceAndNoTemporary) {
  CallCounts calls;
  Pipeline pipe({.threads = 2, .trace = true});
  build_traced(pipe, calls, 2000);
  pipe.run();
  TempPath file("trace_full_disk");
  const std::string previous = "{\"traceEvents\":[]}\n";
  { std::ofstream(file.path()) << previous; }
  std::string error;
  {
    // Capped and restored around the write alone; SIGXFSZ (which would end the process) ignored.
    rlimit saved{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
    rlimit capped = saved;
    capped.rlim_cur = 4096;
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &capped), 0);
    try {
      pipe.write_trace(file.path());
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, old_handler);
  }
  EXPECT_TRUE(contains(error, file.path().string())) << error;
  EXPECT_TRUE(contains(error, "File too large")) << error;
  EXPECT_EQ(read_text(file.path()), previous);
  EXPECT_FALSE(std::filesystem::exists(file.path().string() + ".tmp"));
}

}  // namespace
}  // namespace stoke::graph::test
