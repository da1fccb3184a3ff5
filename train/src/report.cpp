// RunRecorder's bookkeeping: phases, samples from cumulative counters, bounded memory, and the
// atomic write of the page (report_page.cpp makes the page itself).
#include "stoke/train/report.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <system_error>

#include "stoke/base/atomic_file.hpp"

namespace stoke::train {

namespace fs = std::filesystem;

namespace {

double seconds_of(std::chrono::nanoseconds t) { return std::chrono::duration<double>(t).count(); }

double fraction(double part, double whole) { return whole > 0 ? std::clamp(part / whole, 0.0, 1.0) : 0.0; }

/// `a` and `b` weighted by the time each covers (a missing value is left out of the mean).
std::optional<double> weighted(std::optional<double> a, double wa, std::optional<double> b, double wb) {
  if (!a) return b;
  if (!b) return a;
  return wa + wb > 0 ? (*a * wa + *b * wb) / (wa + wb) : *b;
}

/// One sample covering both `a`'s interval and the later `b`'s.
RunRecorder::Sample merge(const RunRecorder::Sample& a, const RunRecorder::Sample& b) {
  const double wa = a.interval;
  const double wb = b.interval;
  RunRecorder::Sample m;
  m.seconds = b.seconds;
  m.interval = wa + wb;
  m.phase = wa > wb ? a.phase : b.phase;
  m.images_per_sec = *weighted(a.images_per_sec, wa, b.images_per_sec, wb);
  m.gpu_busy = weighted(a.gpu_busy, wa, b.gpu_busy, wb);
  m.compute_busy = *weighted(a.compute_busy, wa, b.compute_busy, wb);
  // The stages by name: the same list in both but at a phase boundary, where a stage present in
  // one only keeps its own value.
  m.stages = a.stages;
  for (const StageSample& s : b.stages) {
    auto it = std::find_if(m.stages.begin(), m.stages.end(), [&](const StageSample& x) { return x.name == s.name; });
    if (it == m.stages.end()) {
      m.stages.push_back(s);
      continue;
    }
    it->busy = *weighted(it->busy, wa, s.busy, wb);
    it->starved = *weighted(it->starved, wa, s.starved, wb);
    it->blocked = *weighted(it->blocked, wa, s.blocked, wb);
  }
  return m;
}

/// The busy fraction of the stage named `compute_stage`, else of the last stage (0 without any).
double compute_busy_of(const std::vector<StageSample>& stages, const std::string& compute_stage) {
  auto it = std::find_if(stages.begin(), stages.end(), [&](const StageSample& s) { return s.name == compute_stage; });
  if (it != stages.end()) return it->busy;
  return stages.empty() ? 0 : stages.back().busy;
}

}  // namespace

RunRecorder::RunRecorder(std::size_t max_samples, std::size_t max_moves, std::size_t max_skips)
    : max_samples_(max_samples), max_moves_(max_moves), max_skips_(max_skips) {
  if (max_samples < 16)
    throw std::invalid_argument("RunRecorder: max_samples is " + std::to_string(max_samples) + "; give 16 or more");
}

void RunRecorder::begin_phase(double seconds, int epoch, std::string phase, std::string compute_stage) {
  std::lock_guard lock(mutex_);
  begin_phase_locked(seconds, epoch, std::move(phase), std::move(compute_stage));
}

void RunRecorder::begin_phase_locked(double seconds, int epoch, std::string phase, std::string compute_stage) {
  if (pending_) {
    push_locked(*pending_);
    pending_.reset();
  }
  Phase p;
  p.epoch = epoch;
  p.compute_stage = compute_stage.empty() ? phase : std::move(compute_stage);
  p.name = std::move(phase);
  p.start = seconds;
  phases_.push_back(std::move(p));
  last_seconds_ = seconds;
  last_images_ = 0;
  last_counters_.clear();
}

void RunRecorder::sample(double seconds, std::int64_t images, const std::vector<graph::StageStats>& stages,
                         std::optional<double> gpu_busy) {
  std::lock_guard lock(mutex_);
  sample_locked(seconds, images, stages, gpu_busy);
}

void RunRecorder::sample_locked(double seconds, std::int64_t images, const std::vector<graph::StageStats>& stages,
                                std::optional<double> gpu_busy) {
  if (phases_.empty() || phases_.back().end >= phases_.back().start)
    begin_phase_locked(phases_.empty() ? 0 : phases_.back().end, phases_.empty() ? 0 : phases_.back().epoch, "run");
  const double dt = seconds - last_seconds_;
  if (!(dt > 0)) return;
  const double dt_ns = dt * 1e9;

  Sample s;
  s.seconds = seconds;
  s.interval = dt;
  s.phase = static_cast<int>(phases_.size()) - 1;
  // A count below the previous one means a new pipeline the caller did not announce: count from 0.
  const std::int64_t done = images >= last_images_ ? images - last_images_ : images;
  s.images_per_sec = static_cast<double>(done) / dt;
  if (gpu_busy) s.gpu_busy = std::clamp(*gpu_busy, 0.0, 1.0);

  std::vector<Counters> now;
  now.reserve(stages.size());
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const graph::StageStats& st = stages[i];
    Counters c{st.name, st.busy.count(), st.starved.count(), st.blocked.count()};
    Counters before{st.name, 0, 0, 0};
    if (i < last_counters_.size() && last_counters_[i].name == st.name) {
      before = last_counters_[i];
    } else {
      auto it = std::find_if(last_counters_.begin(), last_counters_.end(),
                             [&](const Counters& x) { return x.name == st.name; });
      if (it != last_counters_.end()) before = *it;
    }
    const auto delta = [](std::int64_t now_ns, std::int64_t before_ns) {
      return static_cast<double>(now_ns >= before_ns ? now_ns - before_ns : now_ns);
    };
    s.stages.push_back(StageSample{st.name, fraction(delta(c.busy, before.busy), dt_ns * std::max(st.concurrency, 1)),
                                   fraction(delta(c.starved, before.starved), dt_ns),
                                   fraction(delta(c.blocked, before.blocked), dt_ns)});
    now.push_back(std::move(c));
  }
  s.compute_busy = compute_busy_of(s.stages, phases_.back().compute_stage);
  last_counters_ = std::move(now);
  last_seconds_ = seconds;
  last_images_ = images;

  // Combined `stride_` at a time since the last halving, so that the resolution stays even.
  if (pending_) {
    pending_ = merge(*pending_, s);
  } else {
    pending_ = std::move(s);
    pending_count_ = 0;
  }
  if (++pending_count_ >= stride_) {
    push_locked(std::move(*pending_));
    pending_.reset();
  }
}

void RunRecorder::push_locked(Sample sample) {
  if (samples_.size() >= max_samples_) halve_locked();
  samples_.push_back(std::move(sample));
}

void RunRecorder::halve_locked() {
  std::vector<Sample> merged;
  merged.reserve(samples_.size() / 2 + 1);
  for (std::size_t i = 0; i < samples_.size(); i += 2)
    merged.push_back(i + 1 < samples_.size() ? merge(samples_[i], samples_[i + 1]) : samples_[i]);
  samples_ = std::move(merged);
  stride_ *= 2;
}

void RunRecorder::decision(double seconds, const graph::Decision& d) {
  std::lock_guard lock(mutex_);
  if (phases_.empty()) begin_phase_locked(0, 0, "run");
  phases_.back().live_decisions = true;
  ++moves_total_;
  if (moves_.size() < max_moves_) moves_.push_back(Move{seconds, static_cast<int>(phases_.size()) - 1, d});
}

void RunRecorder::end_phase(double seconds, std::int64_t images, const graph::RunReport& report,
                            const std::vector<SkippedFile>& files) {
  std::lock_guard lock(mutex_);
  const double elapsed = seconds_of(report.elapsed);
  if (phases_.empty() || phases_.back().end >= phases_.back().start)
    begin_phase_locked(std::max(0.0, seconds - elapsed), phases_.empty() ? 0 : phases_.back().epoch, "run");
  sample_locked(seconds, images, report.stages, std::nullopt);
  if (pending_) {
    push_locked(std::move(*pending_));
    pending_.reset();
  }

  Phase& phase = phases_.back();
  const int index = static_cast<int>(phases_.size()) - 1;
  phase.end = std::max(seconds, phase.start);
  phase.images = images;
  phase.stopped = report.stopped || report.cancelled;
  phase.totals.clear();
  phase.concurrency.clear();
  for (const graph::StageStats& st : report.stages) {
    phase.totals.push_back(StageSample{st.name, fraction(seconds_of(st.busy), elapsed * std::max(st.concurrency, 1)),
                                       fraction(seconds_of(st.starved), elapsed),
                                       fraction(seconds_of(st.blocked), elapsed)});
    phase.concurrency.push_back(st.concurrency);
  }

  record_skips_locked(index, report, files);

  if (!phase.live_decisions) {
    // The report's times count from the pipeline's start, which is `elapsed` before its end.
    const double pipeline_start = seconds - elapsed;
    for (const graph::Decision& d : report.decisions) {
      ++moves_total_;
      if (moves_.size() < max_moves_) moves_.push_back(Move{pipeline_start + seconds_of(d.at), index, d});
    }
  }
}

void RunRecorder::record_skips_locked(int phase, const graph::RunReport& report,
                                      const std::vector<SkippedFile>& files) {
  std::vector<SkippedFile> named = files;
  if (named.empty()) {
    for (const graph::SkippedItem& item : report.skipped_items)
      named.push_back({"item " + std::to_string(item.index), item.stage + ": " + item.reason, {}});
  }
  for (const SkippedFile& f : named) {
    auto it = std::find_if(skips_.begin(), skips_.end(), [&](const Skip& s) { return s.file == f.file; });
    if (it == skips_.end()) {
      if (skips_.size() >= max_skips_) continue;
      it = skips_.insert(skips_.end(), Skip{f.file, f.reason, {}});
    }
    if (it->phases.empty() || it->phases.back() != phase) {
      it->phases.push_back(phase);
      ++skips_listed_;
    }
  }
  skips_total_ += std::max<std::uint64_t>(report.skipped, named.size());
}

void RunRecorder::epoch(const EpochRow& row) {
  std::lock_guard lock(mutex_);
  epochs_.push_back(row);
}

void RunRecorder::left_out(const std::string& dataset, const LeftOut& files) {
  std::lock_guard lock(mutex_);
  left_out_total_ += std::max<std::uint64_t>(files.count, files.files.size());
  for (const nodes::IgnoredFile& file : files.files) {
    if (left_out_.size() >= max_skips_) break;
    left_out_.push_back({dataset, file});
  }
}

void RunRecorder::network(const nodes::NetworkStats& stats) {
  std::lock_guard lock(mutex_);
  network_ = stats;
}

std::vector<RunRecorder::Sample> RunRecorder::samples() const {
  std::lock_guard lock(mutex_);
  return all_samples_locked();
}

std::vector<RunRecorder::Sample> RunRecorder::all_samples_locked() const {
  std::vector<Sample> all = samples_;
  if (pending_) {
    if (all.size() < max_samples_)
      all.push_back(*pending_);
    else
      all.back() = merge(all.back(), *pending_);
  }
  return all;
}

void RunRecorder::write_html(const fs::path& path, const std::string& title,
                             const std::vector<std::pair<std::string, std::string>>& settings) const {
  base::write_file_atomically(path, html(title, settings), "report");
}

FitCallbacks record_fit(RunRecorder& recorder, FitCallbacks callbacks, FitRecording recording) {
  // One state shared by the hooks (copies of FitCallbacks share it too).
  struct State {
    RunRecorder& recorder;
    FitCallbacks inner;
    FitRecording recording;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    double now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
    std::optional<double> gpu_busy() const { return recording.gpu_busy ? recording.gpu_busy() : std::nullopt; }
  };
  auto state = std::make_shared<State>(State{recorder, std::move(callbacks), std::move(recording)});
  FitCallbacks out = state->inner;
  out.on_pass_begin = [state](std::int64_t epoch, Phase phase) {
    state->recorder.begin_phase(state->now(), static_cast<int>(epoch), to_string(phase));
    if (state->inner.on_pass_begin) state->inner.on_pass_begin(epoch, phase);
  };
  out.on_progress = [state](const FitProgress& p) {
    state->recorder.sample(state->now(), p.totals.images, p.totals.report.stages, state->gpu_busy());  // the pass's own
    if (state->inner.on_progress) state->inner.on_progress(p);
  };
  out.on_pass_end = [state](std::int64_t epoch, Phase phase, const EpochTotals& totals) {
    // The pass's last interval with the GPU's busy too (end_phase's own sample, at the same time,
    // then adds nothing): a pass shorter than a progress period still has it.
    const double now = state->now();
    state->recorder.sample(now, totals.images, totals.report.stages, state->gpu_busy());
    state->recorder.end_phase(now, totals.images, totals.report, totals.skipped_files);
    if (state->inner.on_pass_end) state->inner.on_pass_end(epoch, phase, totals);
  };
  out.on_epoch = [state](const EpochSummary& s) {
    state->recorder.epoch({.epoch = static_cast<int>(s.epoch),
                           .train_loss = s.train_loss,
                           .train_top1 = s.train_top1,
                           .val_top1 = s.val_top1,
                           .val_top5 = s.val_top5,
                           .images_per_sec = s.images_per_sec,
                           .compute_busy = s.train.compute_busy,
                           .skipped = s.skipped,
                           .rank_images_per_sec = s.rank_images_per_sec,
                           .allreduce_seconds = s.allreduce_seconds,
                           .allreduce_hidden = allreduce_hidden(s)});
    if (state->recording.network) {
      if (const std::optional<nodes::NetworkStats> network = state->recording.network())
        state->recorder.network(*network);
    }
    if (!state->recording.html.empty()) {
      state->recorder.write_html(state->recording.html, state->recording.title, state->recording.settings);
    }
    return state->inner.on_epoch ? state->inner.on_epoch(s) : true;
  };
  return out;
}

}  // namespace stoke::train
