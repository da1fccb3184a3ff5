#include "stoke/bench/device.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <stoke/gpu/convert.hpp>
#include <stoke/gpu/event.hpp>
#include <stoke/gpu/memory.hpp>
#include <stoke/gpu/nvml_monitor.hpp>
#include <stoke/gpu/pinned_allocator.hpp>
#include <stoke/gpu/stream.hpp>
#include <stoke/gpu/synthetic.hpp>
#include <stoke/gpu/timeline.hpp>
#include <stoke/graph/pipeline.hpp>
#include <stoke/nodes/batch_pool.hpp>
#include <utility>
#include <vector>

#include "stoke/bench/timing.hpp"

namespace stoke::bench {
namespace {

using Millis = std::chrono::duration<double, std::milli>;

double rate(std::uint64_t images, double seconds) { return seconds > 0 ? static_cast<double>(images) / seconds : 0.0; }

void check(const DeviceBenchOptions& o) {
  if (o.batch <= 0 || o.size <= 0) throw std::invalid_argument("batch and size must be positive");
  if (o.batches == 0 && !(o.seconds > 0)) throw std::invalid_argument("give a number of batches or of seconds");
  if (o.compute_us < 0) throw std::invalid_argument("compute_us must be >= 0");
  if (o.streams < 1 || o.depth < 1 || o.slots < 1 || o.copy_reps < 1)
    throw std::invalid_argument("streams, depth, slots and copy_reps must be at least 1");
}

std::optional<gpu::ConvertOptions> convert_of(const DeviceBenchOptions& o) {
  if (!o.convert) return std::nullopt;
  return gpu::ConvertOptions{.dtype = *o.convert};
}

// Fills every slot's pixels once with deterministic bytes: later batches reuse the slots' memory
// as it is, so the source costs nothing per batch and never limits the rate.
void fill_pool(nodes::BatchPool& pool) {
  std::vector<nodes::Batch> all;
  for (std::size_t s = 0; s < pool.slots(); ++s) {
    nodes::Batch& batch = all.emplace_back(pool.acquire());
    batch.set_size(batch.capacity());
    auto pixels = batch.u8();
    for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>((i * 131 + s * 7) >> 2);
  }
}

// GB/s of `reps` copies of `bytes` from `src` into `dst` on `stream`, timed with events on it.
double copy_rate(gpu::Device device, const void* src, void* dst, std::size_t bytes, int reps, gpu::StreamView stream) {
  gpu::Event start(device, {.timing = true}), end(device, {.timing = true});
  gpu::copy_async(dst, src, bytes, stream);  // untimed: first touch of the pages, driver staging
  start.record(stream);
  for (int r = 0; r < reps; ++r) gpu::copy_async(dst, src, bytes, stream);
  end.record(stream);
  end.synchronize();
  const double ms = gpu::Event::elapsed(start, end).count();
  return ms > 0 ? static_cast<double>(bytes) * reps / (ms * 1e6) : 0.0;
}

Bandwidth measure_bandwidth(const DeviceBenchOptions& o, gpu::Device device) {
  if (!device.is_cuda()) return {.skipped = "the CPU device computes on the host batches: nothing crosses"};
  const gpu::DeviceGuard current(device);
  const std::size_t bytes = batch_shape(o).data_bytes();
  gpu::Stream stream(device);
  gpu::DeviceBuffer dst(device, bytes);
  gpu::PinnedBuffer pinned(bytes);
  std::fill(pinned.bytes().begin(), pinned.bytes().end(), std::byte{0x5a});
  const std::vector<std::byte> pageable(bytes, std::byte{0x5a});  // written, so its pages exist
  Bandwidth result;
  result.pinned_gbps = copy_rate(device, pinned.data(), dst.data(), bytes, o.copy_reps, stream);
  result.pageable_gbps = copy_rate(device, pageable.data(), dst.data(), bytes, o.copy_reps, stream);
  return result;
}

// Percent of the copies' GPU time during which some compute stream was busy too.
double copy_hidden_pct(const std::vector<gpu::GpuSpan>& spans) {
  std::vector<std::pair<double, double>> busy;  // compute spans, merged into disjoint intervals
  for (const auto& s : spans)
    if (s.kind == gpu::GpuSpan::Kind::compute) busy.emplace_back(s.start_ms, s.end_ms);
  std::sort(busy.begin(), busy.end());
  std::vector<std::pair<double, double>> merged;
  for (const auto& b : busy) {
    if (!merged.empty() && b.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, b.second);
    } else {
      merged.push_back(b);
    }
  }
  double total = 0, hidden = 0;
  for (const auto& s : spans) {
    if (s.kind != gpu::GpuSpan::Kind::copy) continue;
    total += s.end_ms - s.start_ms;
    auto it = std::lower_bound(merged.begin(), merged.end(), s.start_ms,
                               [](const auto& interval, double t) { return interval.second <= t; });
    for (; it != merged.end() && it->first < s.end_ms; ++it)
      hidden += std::min(s.end_ms, it->second) - std::max(s.start_ms, it->first);
  }
  return total > 0 ? 100.0 * hidden / total : std::nan("");
}

// NVML's mean utilization over the run, or why there is none.
void read_monitor(const gpu::NvmlMonitor& monitor, PipelinedRun& r) {
  const gpu::GpuMonitorStats stats = monitor.stats();
  if (!monitor.available()) {
    r.gpu_util_note = monitor.unavailable_reason();
  } else if (stats.samples == 0) {
    r.gpu_util_note =
        "no sample during the run (NVML samples every " + std::to_string(monitor.period().count()) + " ms)";
  } else {
    r.gpu_util_pct = stats.mean_utilization_pct;
  }
}

PipelinedRun run_pipelined(const DeviceBenchOptions& o, gpu::Device device, nodes::BatchPool& pool,
                           const DeviceBenchCallbacks& callbacks) {
  auto timeline = device.is_cuda() ? std::make_shared<gpu::Timeline>(device) : nullptr;
  gpu::ToDevice to_device(device, pool.shape(), {.slots = pool.slots(), .timeline = timeline});
  const std::chrono::microseconds cost(o.compute_us);
  gpu::Compute compute(device, [cost](gpu::DeviceBatch&, gpu::StreamView stream) { gpu::synthetic_work(stream, cost); },
                       {.streams = o.streams, .depth = o.depth, .convert = convert_of(o), .timeline = timeline});
  using Done = decltype(compute)::Output;
  gpu::NvmlMonitor monitor(device);

  // As many items in flight as there are slots, so the source's acquire() finds a free slot
  // (a slot is given back before its item leaves the pipeline, except that on a GPU the copy
  // watcher may return it a moment after the compute watcher finished the batch: acquire() then
  // blocks one worker for that moment, which is acceptable in this benchmark). Threads: one per
  // compute call that may run at once (on the CPU it spins), plus the source, to-device and sink.
  graph::Pipeline pipe({.max_in_flight = pool.slots(), .threads = std::max(4, o.streams * o.depth + 3)});
  std::atomic<std::uint64_t> batches{0}, images{0};
  pipe.source("batches",
              [&pool, limit = o.batches, made = std::uint64_t{0}]() mutable -> std::optional<nodes::Batch> {
                if (limit > 0 && made == limit) return std::nullopt;
                nodes::Batch batch = pool.acquire();
                batch.set_size(batch.capacity());
                std::uint64_t index = made * batch.capacity();
                for (auto& label : batch.labels()) label = static_cast<std::int32_t>(index % 1000);
                for (auto& i : batch.indices()) i = index++;
                ++made;
                return batch;
              })
      .async<gpu::DeviceBatch>("to-device", to_device, gpu::ToDevice::stage_options())
      .async<Done>("compute", compute, compute.stage_options())
      .sink("done", [&](Done done) {
        images.fetch_add(done.size(), std::memory_order_relaxed);
        batches.fetch_add(1, std::memory_order_relaxed);
      });

  monitor.reset();
  Tick tick;
  if (callbacks.progress) tick = [&](double t) { callbacks.progress(images.load(), t); };
  const TimedRun run = run_timed(pipe, o.seconds, std::chrono::seconds(1), tick);
  PipelinedRun r;
  r.batches = batches.load();
  r.images = images.load();
  // run()'s whole wall time rather than report.elapsed: the stages' starved clocks start while
  // run() sets the graph up, before report.elapsed does, and would otherwise exceed it.
  r.seconds = run.seconds;
  r.compute = compute.stats();
  r.transfer = to_device.stats();
  for (const auto& stage : run.report.stages)
    if (stage.name == "compute") r.starved_ms = Millis(stage.starved).count();
  r.host_slot_waits = pool.stats().waits;
  if (timeline) r.copy_hidden_pct = copy_hidden_pct(timeline->spans());
  read_monitor(monitor, r);
  return r;
}

// The same batches without overlap: copy, convert and compute on one stream, then wait, batch
// after batch (on the CPU: memcpy, convert, spin). Stops after `count` batches, or `seconds`.
SerialRun run_serial(const DeviceBenchOptions& o, gpu::Device device, nodes::BatchPool& pool, std::uint64_t count,
                     double seconds) {
  const gpu::DeviceGuard current(device);
  const nodes::BatchShape shape = pool.shape();
  const std::optional<gpu::ConvertOptions> convert = convert_of(o);
  const std::size_t data_bytes = shape.data_bytes(), label_offset = (data_bytes + 255) / 256 * 256;
  const std::size_t label_bytes = shape.batch_size * sizeof(std::int32_t);
  const std::size_t out_bytes =
      convert ? gpu::converted_bytes(shape.batch_size, shape.height, shape.width, shape.channels, convert->dtype) : 0;
  nodes::Batch host = pool.acquire();
  host.set_size(host.capacity());

  std::optional<gpu::Stream> stream;
  gpu::DeviceBuffer device_in, device_out;
  std::vector<std::byte> host_in, host_out;  // the CPU device's "device memory"
  void* in = nullptr;
  void* out = nullptr;
  if (device.is_cuda()) {
    stream.emplace(device);
    device_in = gpu::DeviceBuffer(device, label_offset + label_bytes);
    if (out_bytes > 0) device_out = gpu::DeviceBuffer(device, out_bytes);
    in = device_in.data();
    out = device_out.data();
  } else {
    host_in.resize(label_offset + label_bytes);
    host_out.resize(out_bytes);
    in = host_in.data();
    out = host_out.data();
  }
  const gpu::StreamView view = stream ? stream->view() : gpu::StreamView::host();
  const std::chrono::microseconds cost(o.compute_us);
  auto one_batch = [&] {
    gpu::copy_async(in, host.data().data(), data_bytes, view);
    gpu::copy_async(static_cast<std::byte*>(in) + label_offset, host.labels().data(), label_bytes, view);
    if (convert)
      gpu::convert_u8(static_cast<const std::uint8_t*>(in), out, shape.batch_size, shape.height, shape.width,
                      shape.channels, *convert, view);
    gpu::synthetic_work(view, cost);
    view.synchronize();
  };
  one_batch();  // untimed: loads the kernels, warms the caches
  SerialRun r;
  const auto start = Clock::now();
  while (r.batches < count && (seconds <= 0 || Clock::now() - start < std::chrono::duration<double>(seconds))) {
    one_batch();
    ++r.batches;
  }
  r.seconds = seconds_between(start, Clock::now());
  r.images = r.batches * shape.batch_size;
  return r;
}

}  // namespace

nodes::BatchShape batch_shape(const DeviceBenchOptions& o) {
  return {.batch_size = static_cast<std::size_t>(o.batch), .height = o.size, .width = o.size, .channels = 3};
}

double DeviceBenchResult::images_per_sec() const noexcept { return rate(pipelined.images, pipelined.seconds); }
double DeviceBenchResult::serial_images_per_sec() const noexcept { return rate(serial.images, serial.seconds); }

double DeviceBenchResult::overlap_speedup() const noexcept {
  return serial_images_per_sec() > 0 ? images_per_sec() / serial_images_per_sec() : 0.0;
}

double DeviceBenchResult::ideal_speedup() const noexcept {
  const double copy = pipelined.transfer.copy_time.count(), compute = pipelined.compute.compute_time.count();
  return std::max(copy, compute) > 0 ? (copy + compute) / std::max(copy, compute) : 1.0;
}

double DeviceBenchResult::compute_busy_pct() const noexcept {
  const double streams = std::max(pipelined.compute.streams, 1);
  return pipelined.seconds > 0 ? 100.0 * pipelined.compute.compute_time.count() / (pipelined.seconds * 1000.0 * streams)
                               : 0.0;
}

double DeviceBenchResult::compute_starved_pct() const noexcept {
  return pipelined.seconds > 0 ? pipelined.starved_ms / (pipelined.seconds * 10.0) : 0.0;
}

DeviceBenchResult measure_device(gpu::Device device, const DeviceBenchOptions& options,
                                 const DeviceBenchCallbacks& callbacks) {
  check(options);
  nodes::BatchPool pool(batch_shape(options), static_cast<std::size_t>(options.slots), gpu::batch_allocator(device));
  fill_pool(pool);
  DeviceBenchResult result{.options = options, .device = device};
  result.bandwidth = measure_bandwidth(options, device);
  run_serial(options, device, pool, 0, 0);  // one untimed batch: the kernels load before anything is timed
  result.pipelined = run_pipelined(options, device, pool, callbacks);
  if (callbacks.serial_starts) callbacks.serial_starts();
  result.serial = run_serial(options, device, pool, result.pipelined.batches, options.seconds);
  return result;
}

void to_json(nlohmann::ordered_json& json, const DeviceBenchResult& r) {
  const DeviceBenchOptions& o = r.options;
  const Bandwidth& bw = r.bandwidth;
  const PipelinedRun& p = r.pipelined;
  nlohmann::ordered_json bandwidth = {{"measured", bw.skipped.empty()}};
  if (bw.skipped.empty()) {
    bandwidth["copy_reps"] = o.copy_reps;
    bandwidth["pinned_gbps"] = bw.pinned_gbps;
    bandwidth["pageable_gbps"] = bw.pageable_gbps;
    bandwidth["pinned_over_pageable"] = bw.pinned_over_pageable();
  } else {
    bandwidth["skipped"] = bw.skipped;
  }
  json = {{"bench", "device"},
          {"device", r.device.str()},
          {"batch", o.batch},
          {"size", o.size},
          {"batch_bytes", batch_shape(o).data_bytes()},
          {"convert", std::string(o.convert ? gpu::to_string(*o.convert) : "none")},
          {"compute_us", o.compute_us},
          {"streams", o.streams},
          {"depth", o.depth},
          {"slots", o.slots},
          {"bandwidth", bandwidth},
          {"batches", p.batches},
          {"images", p.images},
          {"seconds", p.seconds},
          {"images_per_sec", r.images_per_sec()},
          {"compute_busy_pct", r.compute_busy_pct()},
          {"compute_time_ms", p.compute.compute_time.count()},
          {"compute_starved_ms", p.starved_ms},
          {"compute_starved_pct", r.compute_starved_pct()},
          {"copy_bytes", p.transfer.bytes},
          {"copy_time_ms", p.transfer.copy_time.count()},
          {"copy_gbps", p.transfer.gigabytes_per_second()},
          {"copy_hidden_pct", p.copy_hidden_pct},
          {"device_slot_waits", p.transfer.slot_waits},
          {"host_slot_waits", p.host_slot_waits},
          {"gpu_util_pct", p.gpu_util_pct}};
  if (!p.gpu_util_note.empty()) json["gpu_util_note"] = p.gpu_util_note;
  json["serial_batches"] = r.serial.batches;
  json["serial_seconds"] = r.serial.seconds;
  json["serial_images_per_sec"] = r.serial_images_per_sec();
  json["overlap_speedup"] = r.overlap_speedup();
  json["ideal_speedup"] = r.ideal_speedup();
}

}  // namespace stoke::bench
