#include "stoke/graph/detail/runtime.hpp"

#include <algorithm>
#include <utility>

#include "runtime_impl.hpp"
#include "stoke/graph/detail/clock.hpp"
#include "stoke/graph/detail/stage_base.hpp"
#include "thread_priority.hpp"

namespace stoke::graph::detail {

Runtime::Runtime(PipelineOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()), max_in_flight_(options_.max_in_flight) {
  if (options_.max_in_flight == 0) {
    options_.max_in_flight = 1;
    max_in_flight_ = 1;
  }
  if (options_.threads > 0) {
    // oneTBB caps its workers at the core count unless told otherwise; a pipeline that asks for
    // more threads (e.g. stages that wait on I/O) gets them for its lifetime.
    if (static_cast<std::size_t>(options_.threads) >
        tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism))
      impl_->parallelism.emplace(tbb::global_control::max_allowed_parallelism,
                                 static_cast<std::size_t>(options_.threads));
    impl_->arena = std::make_unique<tbb::task_arena>(options_.threads);
  } else {
    impl_->arena = std::make_unique<tbb::task_arena>();
  }
  impl_->base_nice = own_nice();
  // At least two: oneTBB gives every arena room for a worker beside the thread that runs it, and
  // work enqueued from outside the pipeline (a Wake rung, an async completion) makes it add one
  // even to a one-thread arena. With 1 here, a serial stage would count as a limit that cannot
  // bind and let two carried visits in at once (found by ThreadSanitizer, scripts/tsan.sh).
  concurrency_ = std::max(2, impl_->arena->max_concurrency());
}

Runtime::~Runtime() = default;

namespace {

// The runtime whose task (or whose execute_and_wait) this thread is running, if any: its spawns
// can go onto this thread's own deque.
thread_local const Runtime* current_runtime = nullptr;

class CurrentRuntime {
 public:
  explicit CurrentRuntime(const Runtime* runtime) noexcept : previous_(current_runtime) { current_runtime = runtime; }
  ~CurrentRuntime() { current_runtime = previous_; }
  CurrentRuntime(const CurrentRuntime&) = delete;
  CurrentRuntime& operator=(const CurrentRuntime&) = delete;

 private:
  const Runtime* previous_;
};

}  // namespace

namespace {
// A whole credit is free: the units out (parts of split items included) leave room for one more.
bool whole_credit_free(std::uint64_t units, std::size_t max) noexcept {
  return units + Runtime::credit_unit <= static_cast<std::uint64_t>(max) * Runtime::credit_unit;
}
}  // namespace

bool Runtime::credit_available_or_park() noexcept {
  if (whole_credit_free(in_flight_.load(), max_in_flight_.load())) return true;
  source_waiting_.store(true);
  if (whole_credit_free(in_flight_.load(), max_in_flight_.load())) {
    source_waiting_.store(false);
    return true;
  }
  return false;
}

void Runtime::release_credits(std::uint64_t n) noexcept {
  if (n == 0) return;
  in_flight_.fetch_sub(n);
  if (source_waiting_.load() && source_waiting_.exchange(false)) source_->wake();
}

void Runtime::set_max_in_flight(std::size_t limit) noexcept {
  max_in_flight_.store(limit == 0 ? 1 : limit);
  if (source_waiting_.load() && source_waiting_.exchange(false) && source_) source_->wake();
}

void Runtime::add_gated(StageBase* stage) {
  const std::lock_guard lock(impl_->mutex);
  gated_.push_back(stage);
}

void Runtime::cancel() noexcept {
  cancel_.store(true);
  // A copy: run() may be adding stages meanwhile (a cancel while it starts), and a stage added
  // after this looks at the flag itself.
  std::vector<StageBase*> gated;
  {
    const std::lock_guard lock(impl_->mutex);
    gated = gated_;
  }
  for (StageBase* stage : gated) stage->wake();
}

void Runtime::fail(StageError error) {
  {
    std::lock_guard lock(impl_->mutex);
    if (!impl_->failure) impl_->failure = std::make_exception_ptr(std::move(error));
  }
  cancel();
}

void Runtime::record_skip(std::string_view stage, std::uint64_t index, std::string reason) {
  skipped_.fetch_add(1);
  std::lock_guard lock(impl_->mutex);
  if (impl_->skips.size() < options_.max_listed_skips)
    impl_->skips.push_back(SkippedItem{std::string(stage), index, std::move(reason)});
}

void Runtime::rethrow_failure() const {
  std::exception_ptr failure;
  {
    std::lock_guard lock(impl_->mutex);
    failure = impl_->failure;
  }
  if (failure) std::rethrow_exception(failure);
}

std::vector<SkippedItem> Runtime::skipped_items() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->skips;
}

void Runtime::begin() noexcept {
  signal_base_ = signal_count.load();
  // Calibrates (~2 ms, once) before the stages' clocks start, not during the run.
  short_call_ticks_ = static_cast<std::int64_t>(20'000.0 / nanoseconds_per_tick());
  started_ticks_ = ticks();
}

void Runtime::execute_and_wait(const std::function<void()>& body) {
  impl_->arena->execute([&] {
    {
      const CurrentRuntime current(this);
      const LowerPriority lower(options_.nice, impl_->base_nice);
      body();
    }
    impl_->group.wait();
  });
}

void Runtime::spawn(StageBase& stage, int tasks) {
  for (int i = 0; i < tasks; ++i) {
    auto task = [this, &stage] {
      const CurrentRuntime current(this);
      const LowerPriority lower(options_.nice, impl_->base_nice);  // per task: oneTBB's workers serve other arenas too
      stage.run_task();
    };
    if (current_runtime == this) {
      impl_->group.run(std::move(task));
    } else {
      impl_->arena->enqueue(impl_->group.defer(std::move(task)));
    }
  }
}

tbb::task_handle Runtime::hold() {
  return impl_->group.defer([] {});
}

}  // namespace stoke::graph::detail
