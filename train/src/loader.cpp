#include "stoke/train/loader.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <stoke/base/atomic_file.hpp>
#include <stoke/graph/pipeline.hpp>
#include <thread>
#include <utility>

#include "stoke/train/json.hpp"

namespace stoke::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The most skipped files a report names (the count covers them all).
constexpr std::size_t listed_skips = 100;

}  // namespace

std::vector<std::uint32_t> positions_in(const nodes::EpochOrder& order, std::uint32_t epoch) {
  const std::vector<std::uint64_t> indices = order.indices(epoch);
  std::vector<std::uint32_t> position(indices.empty() ? 0 : *std::max_element(indices.begin(), indices.end()) + 1);
  // Backwards, so that an item a padded share repeats at its end keeps its first position.
  for (std::size_t i = indices.size(); i-- > 0;) position[indices[i]] = static_cast<std::uint32_t>(i);
  return position;
}

// One pipeline, from a position on through the epochs, and the queue its sink fills.
struct LoaderRun {
  InputConfig config;  // first_epoch and start: where it began
  Input input;
  graph::Pipeline pipe;
  pid_t pid = ::getpid();
  Clock::time_point started = Clock::now();
  double waited = 0;  // the caller's waits in next(), this run's

  std::mutex mutex;
  std::condition_variable filled;
  std::deque<nodes::Batch> queue;  // bounded by the pool: each batch holds a slot
  std::vector<graph::Decision> decisions;
  bool ended = false;
  std::exception_ptr failure;
  graph::RunReport report;  // once ended
  std::thread thread;

  LoaderRun(nodes::DatasetPtr dataset, const InputConfig& c)
      : config(c), input(make_input(std::move(dataset), c)), pipe(options()) {
    add_input(pipe, input, config)
        .sink("loader",
              [this](nodes::Batch batch) {
                {
                  const std::lock_guard lock(mutex);
                  queue.push_back(std::move(batch));
                }
                filled.notify_one();
              },
              {.capacity = config.prefetch});
    thread = std::thread([this] {
      graph::RunReport r;
      std::exception_ptr error;
      try {
        r = pipe.run();
      } catch (...) {
        error = std::current_exception();
      }
      {
        const std::lock_guard lock(mutex);
        report = std::move(r);
        failure = error;
        ended = true;
      }
      filled.notify_all();
    });
  }

  graph::PipelineOptions options() {
    graph::PipelineOptions o = input.pipeline_options;
    if (o.autotune) {
      auto inner = o.autotune->on_decision;
      o.autotune->on_decision = [this, inner](const graph::Decision& d) {
        {
          const std::lock_guard lock(mutex);
          decisions.push_back(d);
        }
        if (inner) inner(d);
      };
    }
    return o;
  }

  bool forked() const noexcept { return ::getpid() != pid; }

  // Cancels the pipeline and waits for it; the batches queued go back to the pool first.
  ~LoaderRun() {
    {
      const std::lock_guard lock(mutex);
      queue.clear();
    }
    pipe.cancel();
    if (thread.joinable()) thread.join();
  }
};

struct Loader::Impl {
  nodes::DatasetPtr dataset;
  LeftOut left_out;  // what the dataset left out when it opened
  InputConfig config;
  std::uint32_t run_epochs;  // the run's epochs (0: no end)
  nodes::EpochOrder order;
  nodes::BatchShape shape;
  std::optional<gpu::ConvertOptions> convert;  // the input's: the same for every run
  // The caller's thread changes `run` and `at`, under `shared` (stats() and position() may be
  // called from another thread and read them under it); its own reads need no lock.
  mutable std::mutex shared;
  std::shared_ptr<LoaderRun> run;
  LoaderPosition at;                    // where the caller stands
  LoaderPosition stream_at;             // where the running pipeline's next batch continues from
  bool in_epoch = false;                // begin() was called and the epoch has not ended
  bool handed = false;                  // a batch of this epoch was returned
  bool chosen = false;                  // set_epoch() or seek() named the next epoch
  std::optional<nodes::Batch> pending;  // the next epoch's first batch, seen at this one's end
  std::vector<std::uint32_t> positions;
  std::uint32_t positions_epoch = ~std::uint32_t{0};
  std::atomic<std::uint64_t> batches{0};
  std::atomic<std::uint64_t> images{0};

  Impl(nodes::DatasetPtr d, InputConfig c, std::uint32_t epochs)
      : dataset(std::move(d)),
        left_out(left_out_of(*dataset)),
        config(std::move(c)),
        run_epochs(epochs),
        order(dataset->size(), order_options(*dataset, config)),
        at{config.first_epoch, config.start} {
    config.epochs = 0;  // begin() decides the epochs; run_config() where a pipeline stops
    if (config.start > order.per_epoch())
      throw std::invalid_argument("stoke::train::Loader: start " + std::to_string(config.start) +
                                  " is past the epoch's " + std::to_string(order.per_epoch()) + " items");
    if (run_epochs != 0 && config.first_epoch >= run_epochs)
      throw std::invalid_argument("stoke::train::Loader: the first epoch, " + std::to_string(config.first_epoch) +
                                  ", is not before the run's end (epochs " + std::to_string(run_epochs) + ")");
    run = std::make_shared<LoaderRun>(dataset, run_config(at));  // starts at once: the first epoch's batches get ready
    shape = run->input.pool.shape();
    convert = run->input.convert;
    stream_at = at;
  }

  ~Impl() { stop(); }

  // The config of a pipeline that starts at `from` and runs on to the end of the run's epochs
  // (until cancelled where they have no end).
  InputConfig run_config(LoaderPosition from) const {
    InputConfig c = config;
    c.first_epoch = from.epoch;
    c.start = from.position;
    c.epochs = run_epochs == 0 ? 0 : run_epochs - from.epoch;
    return c;
  }

  void stop() {
    if (run && run->forked()) {
      // A child of fork(): the pipeline's threads are the parent's; touching its state -- even
      // giving a held batch back to its pool, which may ring a parked stage -- could hang.
      run->thread.detach();
      (void)new std::shared_ptr<LoaderRun>(std::move(run));  // never destroyed
      if (pending) (void)new nodes::Batch(std::move(*pending));
    }
    pending.reset();
    replace(nullptr);
  }

  // Swaps the run; the old one (when it was the last reference) is cancelled outside the lock.
  void replace(std::shared_ptr<LoaderRun> next) {
    std::shared_ptr<LoaderRun> old;
    {
      const std::lock_guard lock(shared);
      old = std::exchange(run, std::move(next));
    }
  }

  void move_to(LoaderPosition position) {
    const std::lock_guard lock(shared);
    at = position;
  }

  void check_fork() const {
    if (run && run->forked())
      throw std::runtime_error("stoke::train::Loader: the process forked (pid " + std::to_string(run->pid) + " -> " +
                               std::to_string(::getpid()) +
                               ") after the loader started its threads, which stay in the parent; make the Loader in "
                               "the process that iterates it (e.g. after the fork, or with the 'spawn' start method)");
  }

  void begin() {
    check_fork();
    if (in_epoch && handed && !chosen) move_to({at.epoch + 1, 0});  // an epoch left early: the next
    if (run_epochs != 0 && at.epoch >= run_epochs)
      throw std::out_of_range("stoke::train::Loader: epoch " + std::to_string(at.epoch) + " is past the run's " +
                              std::to_string(run_epochs) + " epochs (the loader was made with epochs=" +
                              std::to_string(run_epochs) + "; make it with more, or none, to read on)");
    in_epoch = true;
    handed = false;
    chosen = false;
    if (order.per_epoch() == 0) return;
    const bool live = run && !(run->ended && queue_empty());
    if (live && stream_at == at) return;
    pending.reset();
    replace(nullptr);
    replace(std::make_shared<LoaderRun>(dataset, run_config(at)));
    stream_at = at;
  }

  bool queue_empty() {
    const std::lock_guard lock(run->mutex);
    return run->queue.empty();
  }

  // The epoch ended: the caller goes on to the next.
  nodes::Batch end_epoch() {
    in_epoch = false;
    handed = false;
    move_to({at.epoch + 1, 0});
    stream_at = at;
    return nodes::Batch{};
  }

  std::optional<nodes::Batch> next(std::chrono::milliseconds wait) {
    check_fork();
    if (!in_epoch) throw std::logic_error("stoke::train::Loader::next: no epoch begun (call begin() first)");
    if (order.per_epoch() == 0) return end_epoch();
    nodes::Batch batch;
    if (pending) {
      batch = std::move(*pending);
      pending.reset();
    } else {
      std::unique_lock lock(run->mutex);
      const auto ready = [&] { return !run->queue.empty() || run->ended; };
      if (!ready()) {
        const Clock::time_point start = Clock::now();
        if (wait == std::chrono::milliseconds::max()) {
          run->filled.wait(lock, ready);
        } else if (!run->filled.wait_for(lock, wait, ready)) {
          run->waited += seconds_since(start);
          return std::nullopt;
        }
        run->waited += seconds_since(start);
      }
      if (run->queue.empty()) {  // the pipeline ended
        if (run->failure) {
          const std::exception_ptr failure = run->failure;
          lock.unlock();
          in_epoch = false;
          replace(nullptr);  // the next begin() starts a new one where the caller stands
          std::rethrow_exception(failure);
        }
        return end_epoch();  // (a finite run; the loader's run on until cancelled)
      }
      batch = std::move(run->queue.front());
      run->queue.pop_front();
    }
    if (batch.epoch() != at.epoch) {
      pending = std::move(batch);
      return end_epoch();
    }
    if (positions_epoch != at.epoch) {
      positions = positions_in(order, at.epoch);
      positions_epoch = at.epoch;
    }
    if (batch.size() > 0)
      move_to({at.epoch, std::max<std::size_t>(at.position, positions[batch.indices().back()] + 1u)});
    stream_at = at;
    handed = true;
    batches.fetch_add(1, std::memory_order_relaxed);
    images.fetch_add(batch.size(), std::memory_order_relaxed);
    return batch;
  }

  LoaderStats stats() const {
    LoaderStats s;
    s.batches = batches.load(std::memory_order_relaxed);
    s.images = images.load(std::memory_order_relaxed);
    s.left_out = left_out;
    s.network = dataset->network();
    std::shared_ptr<LoaderRun> r;
    {
      const std::lock_guard lock(shared);
      r = run;
    }
    if (!r) return s;
    graph::RunReport so_far;
    {
      const std::lock_guard lock(r->mutex);
      s.decisions = r->decisions;
      s.waited = r->waited;
      if (r->ended) so_far = r->report;
    }
    if (so_far.stages.empty()) {
      so_far.stages = r->pipe.stats();
      so_far.skipped_items = r->pipe.skipped_items();
    }
    s.stages = std::move(so_far.stages);
    s.seconds = seconds_since(r->started);
    s.max_in_flight = r->pipe.max_in_flight();
    for (const graph::StageStats& stage : s.stages) s.skipped += stage.skipped;
    if (so_far.skipped_items.size() > listed_skips) so_far.skipped_items.resize(listed_skips);
    s.skipped_files = name_skips(so_far, r->input, r->config);
    s.bottleneck = network_or(bottleneck(s), s.stages, s.network);
    return s;
  }

  static std::string bottleneck(const LoaderStats& s) {
    // The caller kept the batches waiting when it hardly ever waited for one itself.
    if (s.seconds > 0 && s.waited < 0.05 * s.seconds && s.batches > 0) return "consumer";
    std::string busiest;
    double most = -1;
    for (const graph::StageStats& stage : s.stages) {
      if (stage.name == "loader") continue;
      const double share = std::chrono::duration<double>(stage.busy).count() / std::max(1, stage.concurrency);
      if (share > most) {
        most = share;
        busiest = stage.name;
      }
    }
    return busiest;
  }
};

Loader::Loader(nodes::DatasetPtr dataset, InputConfig config, std::uint32_t epochs)
    : impl_(std::make_unique<Impl>(std::move(dataset), std::move(config), epochs)) {}

Loader::~Loader() = default;

std::size_t Loader::items_per_epoch() const noexcept { return impl_->order.per_epoch(); }

std::size_t Loader::size() const noexcept {
  const std::size_t items = items_per_epoch(), batch = impl_->config.batch_size;
  return impl_->config.drop_last ? items / batch : (items + batch - 1) / batch;
}

const nodes::BatchShape& Loader::shape() const noexcept { return impl_->shape; }
const InputConfig& Loader::config() const noexcept { return impl_->config; }
const std::optional<gpu::ConvertOptions>& Loader::convert() const noexcept { return impl_->convert; }
const nodes::Dataset& Loader::dataset() const noexcept { return *impl_->dataset; }

void Loader::set_epoch(std::uint32_t epoch) { seek({epoch, 0}); }

void Loader::seek(LoaderPosition position) {
  if (position.position > items_per_epoch())
    throw std::invalid_argument("stoke::train::Loader::seek: position " + std::to_string(position.position) +
                                " is past the epoch's " + std::to_string(items_per_epoch()) + " items");
  impl_->move_to(position);
  impl_->in_epoch = false;
  impl_->chosen = true;
}

LoaderPosition Loader::position() const noexcept {
  const std::lock_guard lock(impl_->shared);
  return impl_->at;
}

void Loader::begin() { impl_->begin(); }

std::optional<LoaderBatch> Loader::next(std::chrono::milliseconds wait) {
  std::optional<nodes::Batch> batch = impl_->next(wait);
  if (!batch) return std::nullopt;
  return LoaderBatch(std::move(*batch));
}

LoaderStats Loader::stats() const { return impl_->stats(); }

void Loader::write_report(const std::filesystem::path& path) const {
  base::write_file_atomically(path, to_json(stats(), position()).dump(2) + "\n", "loader report");
}

// json.hpp's functions for the loader, here rather than in json.cpp: a program that links the
// loader (the Python module) then needs none of fit's and evaluate's code and libraries.

nlohmann::ordered_json to_json(const graph::Decision& d) {
  return {{"at_s", std::chrono::duration<double>(d.at).count()},
          {"kind", graph::to_string(d.kind)},
          {"stage", d.stage.empty() ? std::string("in-flight") : d.stage},
          {"from", d.from},
          {"to", d.to},
          {"why", d.why},
          {"revert", d.revert}};
}

nlohmann::ordered_json to_json(const LoaderStats& s, const LoaderPosition& position) {
  const auto secs = [](std::chrono::nanoseconds t) { return std::chrono::duration<double>(t).count(); };
  nlohmann::ordered_json stages = nlohmann::ordered_json::array(), decisions = stages, skipped = stages;
  for (const graph::StageStats& stage : s.stages) {
    stages.push_back({{"name", stage.name},
                      {"items_out", stage.items_out},
                      {"skipped", stage.skipped},
                      {"busy_s", secs(stage.busy)},
                      {"starved_s", secs(stage.starved)},
                      {"blocked_s", secs(stage.blocked)},
                      {"concurrency", stage.concurrency}});
  }
  for (const graph::Decision& d : s.decisions) decisions.push_back(to_json(d));
  for (const SkippedFile& f : s.skipped_files)
    skipped.push_back({{"file", f.file}, {"reason", f.reason}, {"epochs", f.epochs}});
  return {{"loader", "stoke"},
          {"batches", s.batches},
          {"images", s.images},
          {"seconds", s.seconds},
          {"waited_s", s.waited},
          {"bottleneck", s.bottleneck},
          {"epoch", position.epoch},
          {"position", position.position},
          {"skipped", s.skipped},
          {"skipped_files", std::move(skipped)},
          {"left_out", s.left_out.count},
          {"left_out_files", left_out_files_json(s.left_out)},
          {"network", network_json(s.network)},
          {"max_in_flight", s.max_in_flight},
          {"stages", std::move(stages)},
          {"decisions", std::move(decisions)}};
}

}  // namespace stoke::train
