#include "stoke/graph/detail/stage_base.hpp"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "stoke/graph/errors.hpp"

namespace stoke::graph::detail {

namespace {
std::size_t default_capacity(const StageOptions& options) {
  return options.capacity ? options.capacity : 2 * static_cast<std::size_t>(std::max(options.concurrency.max, 1)) + 2;
}

StageOptions checked(std::string_view name, StageOptions options) {
  auto& c = options.concurrency;
  if (c.min < 1 || c.max < c.min || c.initial < c.min || c.initial > c.max)
    throw std::invalid_argument("stage '" + std::string(name) +
                                "': concurrency needs 1 <= min <= initial <= max (got min " + std::to_string(c.min) +
                                ", initial " + std::to_string(c.initial) + ", max " + std::to_string(c.max) + ")");
  return options;
}
}  // namespace

StageBase::StageBase(Runtime& runtime, std::string name, StageKind kind, StageOptions options)
    : runtime_(runtime),
      name_(std::move(name)),
      kind_(kind),
      options_(checked(name_, options)),
      limit_(options_.concurrency.initial),
      capacity_(default_capacity(options_)) {}

StageBase::~StageBase() {
  if (doorbell_) doorbell_->disconnect();
}

void StageBase::make_gated() {
  gated_ = true;
  doorbell_ = std::make_shared<Doorbell>();
  doorbell_->stage.store(this);
  wake_.emplace(doorbell_);
}

bool StageBase::gate_open_flag_locked(bool flush) {
  if (gate_open_locked(flush)) return true;
  if (!gate_hold_) gate_hold_.emplace(runtime_.hold());
  note_parked_locked();
  return false;
}

void Doorbell::disconnect() noexcept {
  stage.store(nullptr);
  while (ringing.load() != 0) std::this_thread::yield();
}

void StageBase::wire(const Wiring& wiring) { wiring_ = wiring; }

std::size_t next_tally_slot() noexcept {
  static std::atomic<std::size_t> next{0};
  return std::min(next.fetch_add(1, std::memory_order_relaxed), tally_slots - 1);
}

void StageBase::start(Runtime& runtime) {
  if (gated_) runtime.add_gated(this);
  std::lock_guard<tbb::spin_mutex> lock(mutex_);
  running_ = true;
  started_ticks_ = runtime.started_ticks();
}

void StageBase::leave_slow() {
  int tasks = 0;
  bool done = false;
  {
    Locked lock(*this);
    tasks = plan_spawns_locked();
    done = tasks == 0 && finish_ready_locked();
  }
  spawn(tasks);
  if (done) finish();
}


void StageBase::spawn(int tasks) {
  if (tasks > 0) runtime_.spawn(*this, tasks);
}

void StageBase::wake() {
  int tasks = 0;
  bool done = false;
  std::optional<tbb::task_handle> hold;  // let go of only once the tasks it kept room for exist
  {
    Locked lock(*this);
    blocked_.store(false);
    if (parked_since_ != 0) {
      blocked_ticks_ += ticks() - parked_since_;
      parked_since_ = 0;
    }
    hold.swap(gate_hold_);
    tasks = plan_spawns_locked();
    // A gated stage may have had nothing left but a flush its gate held back.
    done = gated_ && tasks == 0 && finish_ready_locked();
  }
  spawn(tasks);
  if (done) finish();
}

namespace {
bool all_have_room(const std::vector<StageBase*>& stages) noexcept {
  for (const StageBase* stage : stages)
    if (!stage->has_room()) return false;
  return true;
}
}  // namespace

bool StageBase::room_or_park_locked() {
  StageBase* down = wiring_.downstream;
  if (down != nullptr) {
    if (down->has_room()) return true;
    blocked_.store(true);
    if (down->has_room()) {
      blocked_.store(false);
      return true;
    }
    note_parked_locked();
    return false;
  }
  // A fan-out: room in every branch (any branch that frees some wakes it).
  if (wiring_.downstreams.empty() || all_have_room(wiring_.downstreams)) return true;
  blocked_.store(true);
  if (all_have_room(wiring_.downstreams)) {
    blocked_.store(false);
    return true;
  }
  note_parked_locked();
  return false;
}

void StageBase::notify_upstream() noexcept {
  if (StageBase* up = wiring_.upstream) {
    if (up->blocked_.load() && up->blocked_.exchange(false)) up->wake();
    return;
  }
  for (StageBase* up : wiring_.upstreams)  // after a join: each of its inputs
    if (up->blocked_.load() && up->blocked_.exchange(false)) up->wake();
}

void StageBase::finish() {
  on_finish();
  Locked lock(*this);
  finished_ = true;
  finished_ticks_ = ticks();
  if (parked_since_ != 0) {
    blocked_ticks_ += finished_ticks_ - parked_since_;
    parked_since_ = 0;
  }
}

bool StageBase::finished() const {
  std::lock_guard<tbb::spin_mutex> lock(mutex_);
  return finished_;
}

std::int64_t StageBase::account(std::uint64_t index, CallTiming call) {
  if (call.weight == 0) return 0;
  const std::int64_t end = ticks();
  const std::int64_t took = end - call.begin;
  tallies_.add(&Tally::busy, took * call.weight);
  if (owns_tally_slot()) {
    Tally& mine = tallies_.mine();
    if (mine.carried.load(std::memory_order_relaxed) > 0) tallies_.add(&Tally::carried_busy, took * call.weight);
    mine.stride = took < runtime_.short_call_ticks() ? sample_stride : 1;
  }
  if (runtime_.tracing()) runtime_.record_span(wiring_.id, index, call.begin, end);
  return end;
}

void StageBase::fail_or_skip(std::uint64_t index, std::exception_ptr error) {
  if (options_.on_error == OnError::skip) {
    skipped_.fetch_add(1, std::memory_order_release);
    runtime_.record_skip(name_, index, describe(error));
  } else {
    runtime_.fail(StageError(name_, index, std::move(error)));
  }
}

void StageBase::note_queue_locked() noexcept { peak_queued_ = std::max(peak_queued_, queued_locked()); }

void StageBase::set_concurrency(int concurrency) {
  int tasks = 0;
  {
    Locked lock(*this);
    limit_.store(std::clamp(concurrency, options_.concurrency.min, options_.concurrency.max));
    tasks = plan_spawns_locked();
  }
  spawn(tasks);
}

void StageBase::set_capacity(std::size_t capacity) {
  capacity_.store(std::max<std::size_t>(capacity, 1));
  notify_upstream();
}

StageStats StageBase::stats() const {
  StageStats s;
  s.name = name_;
  s.kind = kind_;
  std::int64_t window = 0, blocked = 0;
  {
    Locked lock(*this);
    s.concurrency = limit();
    s.queued = queued_locked();
    s.peak_queued = peak_queued_;
    const std::int64_t now = ticks();
    if (running_) window = (finished_ ? finished_ticks_ : now) - started_ticks_;
    blocked = blocked_ticks_ + (parked_since_ != 0 ? now - parked_since_ : 0);
  }
  // The running time: the closed intervals of the slots, the open one (restarted here, so that
  // no interval outgrows the stamp's range however long the stage stays active), and the calls of
  // carried visits. These may overlap (parallel carried calls): the sum may exceed the stage's
  // lifetime, which then leaves no idle time.
  std::uint64_t word = work_.load();
  while (active_in(word) > 0) {
    const std::int64_t now = ticks();
    if (work_.compare_exchange_weak(word, stamp(now) | (word & active_mask))) {
      tallies_.add(&Tally::running, since(word, now));
      break;
    }
  }
  const std::int64_t running = tallies_.sum(&Tally::running) + tallies_.sum(&Tally::carried_busy);
  s.active = active_in(word) + carried();
  // Not running: blocked while parked (a source whenever it is not producing), else starved.
  const std::int64_t idle = std::max<std::int64_t>(window - running, 0);
  if (kind_ == StageKind::source) blocked = idle;
  blocked = std::min(blocked, idle);
  s.starved = std::chrono::nanoseconds(ticks_to_ns(idle - blocked));
  s.blocked = std::chrono::nanoseconds(ticks_to_ns(blocked));
  s.min_concurrency = options_.concurrency.min;
  s.max_concurrency = options_.concurrency.max;
  s.capacity = kind_ == StageKind::source ? 0 : capacity_.load();
  // What left the stage before what entered it: every item counted out was counted in first,
  // so a snapshot taken while items flow never shows more out than in.
  s.items_out = tallies_.sum(&Tally::out);
  s.dropped = dropped_.load();
  s.skipped = skipped_.load();
  s.items_in = tallies_.sum(&Tally::in);
  s.busy = std::chrono::nanoseconds(ticks_to_ns(tallies_.sum(&Tally::busy)));
  return s;
}

}  // namespace stoke::graph::detail

namespace stoke::graph {

void Wake::operator()() const noexcept {
  if (!bell_) return;
  // Counted before the stage is read, so that disconnect() either sees this ring and waits for
  // it, or has cleared the stage before it is read.
  bell_->ringing.fetch_add(1);
  if (detail::StageBase* stage = bell_->stage.load()) stage->wake();
  bell_->ringing.fetch_sub(1);
}

}  // namespace stoke::graph
