// Runtime::Impl: the oneTBB objects and the shared records behind a Runtime (private header).
#pragma once

#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "stoke/graph/detail/runtime.hpp"

namespace stoke::graph::detail {

struct Span {
  int stage;
  int thread;
  std::uint64_t index;
  std::int64_t begin;  // ticks
  std::int64_t end;
};

struct Setting {
  std::string stage;  // empty: the in-flight limit
  std::size_t value;
  std::int64_t at_ns;  // from the start of the run
};

struct Runtime::Impl {
  std::optional<tbb::global_control> parallelism;  // raises oneTBB's thread limit if asked to
  std::unique_ptr<tbb::task_arena> arena;
  int base_nice = 0;  // the maker's own nice value: where PipelineOptions::nice's threads go back to
  // Every task of the run belongs to it: the run ends when its wait() returns, and an outstanding
  // async operation holds a deferred task of it (hold()).
  tbb::task_group group;

  mutable std::mutex mutex;  // guards failure and skips
  std::exception_ptr failure;
  std::vector<SkippedItem> skips;

  std::atomic<std::size_t> spans_recorded{0};
  tbb::enumerable_thread_specific<std::vector<Span>> spans;

  mutable std::mutex schedule_mutex;  // guards decisions and settings
  std::vector<Decision> decisions;
  std::vector<Setting> settings;
};

}  // namespace stoke::graph::detail
