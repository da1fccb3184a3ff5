// `stoke bench device`: the compute side on its own, with synthetic batches and a synthetic
// kernel of known cost. Part 1 times host-to-device copies of one batch from pinned and from
// pageable memory. Part 2 runs source -> to-device -> compute -> sink as a pipeline and reports
// images/s, how busy the compute stage kept its stream(s), how long it starved, and the same
// batches done serially (copy, convert, compute, wait; one at a time) for the overlap speedup.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <optional>
#include <stoke/gpu/compute.hpp>
#include <stoke/gpu/convert.hpp>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/event.hpp>
#include <stoke/gpu/memory.hpp>
#include <stoke/gpu/nvml_monitor.hpp>
#include <stoke/gpu/pinned_allocator.hpp>
#include <stoke/gpu/stream.hpp>
#include <stoke/gpu/synthetic.hpp>
#include <stoke/gpu/timeline.hpp>
#include <stoke/gpu/to_device.hpp>
#include <stoke/graph/pipeline.hpp>
#include <stoke/nodes/batch_pool.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// GCC 12 reports a false null dereference inside Boost.Program_options' typed_value<std::string>.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include "cli.hpp"
#pragma GCC diagnostic pop
#include "commands.hpp"
#include "json.hpp"

namespace stoke::app {
namespace {

namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;
using Millis = std::chrono::duration<double, std::milli>;

struct Config {
  std::string device = "auto";
  int batch = 256;
  int size = 224;
  std::int64_t batches = 200;  // 0 with --seconds: until the time is up
  double seconds = 0;
  int compute_us = 2000;
  int streams = 1;
  int depth = 2;
  int slots = 4;
  std::string convert = "f32";
  int copy_reps = 20;
  bool json = false;
};

struct Bandwidth {
  std::string skipped;  // why it was not measured; empty when it was
  double pinned_gbps = 0;
  double pageable_gbps = 0;
};

struct PipelineResult {
  std::uint64_t batches = 0;
  std::uint64_t images = 0;
  double seconds = 0;
  gpu::ComputeStats compute;
  gpu::TransferStats transfer;
  double starved_ms = 0;  // the compute stage, idle for want of a batch
  std::uint64_t host_slot_waits = 0;
  double copy_hidden_pct = std::nan("");  // copy time under compute (CUDA timeline), NaN: n/a
  double gpu_util_pct = std::nan("");
  std::string gpu_util_note;  // why there is no utilization figure
};

struct SerialResult {
  std::uint64_t batches = 0;
  std::uint64_t images = 0;
  double seconds = 0;
};

double rate(std::uint64_t images, double seconds) { return seconds > 0 ? static_cast<double>(images) / seconds : 0.0; }
std::string format_size(std::size_t bytes) {
  char text[32];
  const double kib = static_cast<double>(bytes) / 1024.0;
  std::snprintf(text, sizeof text, kib < 1024 ? "%.1f KiB" : "%.1f MiB", kib < 1024 ? kib : kib / 1024.0);
  return text;
}

nodes::BatchShape shape_of(const Config& c) {
  return {.batch_size = static_cast<std::size_t>(c.batch), .height = c.size, .width = c.size, .channels = 3};
}

std::optional<gpu::ConvertOptions> convert_of(const Config& c) {
  if (c.convert == "none") return std::nullopt;
  return gpu::ConvertOptions{.dtype = c.convert == "bf16" ? gpu::DType::bf16 : gpu::DType::f32};
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

Bandwidth measure_bandwidth(const Config& c, gpu::Device device) {
  if (!device.is_cuda()) return {.skipped = "the CPU device computes on the host batches: nothing crosses"};
  const gpu::DeviceGuard current(device);
  const std::size_t bytes = shape_of(c).data_bytes();
  gpu::Stream stream(device);
  gpu::DeviceBuffer dst(device, bytes);
  gpu::PinnedBuffer pinned(bytes);
  std::fill(pinned.bytes().begin(), pinned.bytes().end(), std::byte{0x5a});
  const std::vector<std::byte> pageable(bytes, std::byte{0x5a});  // written, so its pages exist
  Bandwidth result;
  result.pinned_gbps = copy_rate(device, pinned.data(), dst.data(), bytes, c.copy_reps, stream);
  result.pageable_gbps = copy_rate(device, pageable.data(), dst.data(), bytes, c.copy_reps, stream);
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

// While alive: once a second prints the progress to stderr (unless quiet) and, once `seconds`
// (if > 0) have passed, stops the pipeline's source.
class Ticker {
 public:
  Ticker(graph::Pipeline& pipe, const std::atomic<std::uint64_t>& images, double seconds, bool quiet)
      : thread_([this, &pipe, &images, seconds, quiet] {
          const auto start = Clock::now();
          const auto deadline =
              start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
          auto next = start + std::chrono::seconds(1);
          bool stopping = !(seconds > 0);  // true once there is no deadline left to watch
          std::unique_lock lock(mutex_);
          while (!done_) {
            if (cv_.wait_until(lock, stopping ? next : std::min(next, deadline), [this] { return done_; })) break;
            const auto now = Clock::now();
            if (!stopping && now >= deadline) {
              pipe.stop();  // the items in flight finish; run() returns once they have
              stopping = true;
            }
            if (now < next) continue;
            next += std::chrono::seconds(1);
            const double t = std::chrono::duration<double>(now - start).count();
            if (!quiet)
              std::fprintf(stderr, "bench device: %llu images, %.1f images/s, %.0f s\n",
                           static_cast<unsigned long long>(images.load()), rate(images.load(), t), t);
          }
        }) {}
  ~Ticker() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

PipelineResult run_pipeline(const Config& c, gpu::Device device, nodes::BatchPool& pool) {
  auto timeline = device.is_cuda() ? std::make_shared<gpu::Timeline>(device) : nullptr;
  gpu::ToDevice to_device(device, pool.shape(), {.slots = pool.slots(), .timeline = timeline});
  const std::chrono::microseconds cost(c.compute_us);
  gpu::Compute compute(device, [cost](gpu::DeviceBatch&, gpu::StreamView stream) { gpu::synthetic_work(stream, cost); },
                       {.streams = c.streams, .depth = c.depth, .convert = convert_of(c), .timeline = timeline});
  using Done = decltype(compute)::Output;
  gpu::NvmlMonitor monitor(device);

  // As many items in flight as there are slots, so the source's acquire() finds a free slot
  // (a slot is given back before its item leaves the pipeline, except that on a GPU the copy
  // watcher may return it a moment after the compute watcher finished the batch: acquire() then
  // blocks one worker for that moment, which is acceptable in this benchmark). Threads: one per
  // compute call that may run at once (on the CPU it spins), plus the source, to-device and sink.
  graph::Pipeline pipe({.max_in_flight = pool.slots(), .threads = std::max(4, c.streams * c.depth + 3)});
  const auto limit = static_cast<std::uint64_t>(c.batches);
  std::atomic<std::uint64_t> batches{0}, images{0};
  pipe.source("batches",
              [&pool, limit, made = std::uint64_t{0}]() mutable -> std::optional<nodes::Batch> {
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
  graph::RunReport report;
  const auto start = Clock::now();
  {
    const Ticker ticker(pipe, images, c.seconds, c.json);
    report = pipe.run();
  }
  PipelineResult r;
  r.batches = batches.load();
  r.images = images.load();
  // run()'s whole wall time rather than report.elapsed: the stages' starved clocks start while
  // run() sets the graph up, before report.elapsed does, and would otherwise exceed it.
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.compute = compute.stats();
  r.transfer = to_device.stats();
  for (const auto& stage : report.stages)
    if (stage.name == "compute") r.starved_ms = Millis(stage.starved).count();
  r.host_slot_waits = pool.stats().waits;
  if (timeline) r.copy_hidden_pct = copy_hidden_pct(timeline->spans());
  const gpu::GpuMonitorStats gpu_stats = monitor.stats();
  if (!monitor.available()) {
    r.gpu_util_note = monitor.unavailable_reason();
  } else if (gpu_stats.samples == 0) {
    r.gpu_util_note =
        "no sample during the run (NVML samples every " + std::to_string(monitor.period().count()) + " ms)";
  } else {
    r.gpu_util_pct = gpu_stats.mean_utilization_pct;
  }
  return r;
}

// The same batches without overlap: copy, convert and compute on one stream, then wait, batch
// after batch (on the CPU: memcpy, convert, spin). Stops after `count` batches, or `seconds`.
SerialResult run_serial(const Config& c, gpu::Device device, nodes::BatchPool& pool, std::uint64_t count,
                        double seconds) {
  const gpu::DeviceGuard current(device);
  const nodes::BatchShape shape = pool.shape();
  const std::optional<gpu::ConvertOptions> convert = convert_of(c);
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
  const std::chrono::microseconds cost(c.compute_us);
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
  SerialResult r;
  const auto start = Clock::now();
  while (r.batches < count && (seconds <= 0 || Clock::now() - start < std::chrono::duration<double>(seconds))) {
    one_batch();
    ++r.batches;
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.images = r.batches * shape.batch_size;
  return r;
}

// (copy + compute) / max(copy, compute) per batch: what perfect overlap would gain.
double ideal_speedup(const PipelineResult& p) {
  const double copy = p.transfer.copy_time.count(), compute = p.compute.compute_time.count();
  return std::max(copy, compute) > 0 ? (copy + compute) / std::max(copy, compute) : 1.0;
}

// Compute time over wall time, per stream: 100 % means every stream was busy the whole run.
double busy_pct(const PipelineResult& p) {
  const double streams = std::max(p.compute.streams, 1);
  return p.seconds > 0 ? 100.0 * p.compute.compute_time.count() / (p.seconds * 1000.0 * streams) : 0.0;
}

void print_json(const Config& c, gpu::Device device, const Bandwidth& bw, const PipelineResult& p,
                const SerialResult& s) {
  Json j;
  j.field("bench", "device");
  j.field("device", device.str());
  j.field("batch", c.batch);
  j.field("size", c.size);
  j.field("batch_bytes", static_cast<std::uint64_t>(shape_of(c).data_bytes()));
  j.field("convert", c.convert);
  j.field("compute_us", c.compute_us);
  j.field("streams", c.streams);
  j.field("depth", c.depth);
  j.field("slots", c.slots);
  j.begin_object("bandwidth");
  j.field("measured", bw.skipped.empty());
  if (bw.skipped.empty()) {
    j.field("copy_reps", c.copy_reps);
    j.field("pinned_gbps", bw.pinned_gbps);
    j.field("pageable_gbps", bw.pageable_gbps);
    j.field("pinned_over_pageable", bw.pageable_gbps > 0 ? bw.pinned_gbps / bw.pageable_gbps : 0.0);
  } else {
    j.field("skipped", bw.skipped);
  }
  j.end_object();
  j.field("batches", p.batches);
  j.field("images", p.images);
  j.field("seconds", p.seconds);
  j.field("images_per_sec", rate(p.images, p.seconds));
  j.field("compute_busy_pct", busy_pct(p));
  j.field("compute_time_ms", p.compute.compute_time.count());
  j.field("compute_starved_ms", p.starved_ms);
  j.field("compute_starved_pct", p.seconds > 0 ? p.starved_ms / (p.seconds * 10.0) : 0.0);
  j.field("copy_bytes", p.transfer.bytes);
  j.field("copy_time_ms", p.transfer.copy_time.count());
  j.field("copy_gbps", p.transfer.gigabytes_per_second());
  j.field("copy_hidden_pct", p.copy_hidden_pct);
  j.field("device_slot_waits", p.transfer.slot_waits);
  j.field("host_slot_waits", p.host_slot_waits);
  j.field("gpu_util_pct", p.gpu_util_pct);
  if (!p.gpu_util_note.empty()) j.field("gpu_util_note", p.gpu_util_note);
  j.field("serial_batches", s.batches);
  j.field("serial_seconds", s.seconds);
  j.field("serial_images_per_sec", rate(s.images, s.seconds));
  j.field("overlap_speedup",
          rate(s.images, s.seconds) > 0 ? rate(p.images, p.seconds) / rate(s.images, s.seconds) : 0.0);
  j.field("ideal_speedup", ideal_speedup(p));
  std::cout << j.str() << '\n';
}

void print_text(const Config& c, gpu::Device device, const Bandwidth& bw, const PipelineResult& p,
                const SerialResult& s) {
  const nodes::BatchShape shape = shape_of(c);
  std::printf("device %s\n", gpu::device_info(device).describe().c_str());
  std::printf("batches of %s (%s), convert %s, synthetic compute %d us, %d stream%s x depth %d, %d slots\n",
              shape.describe().c_str(), format_size(shape.data_bytes()).c_str(), c.convert.c_str(), c.compute_us,
              c.streams, c.streams == 1 ? "" : "s", c.depth, c.slots);
  if (bw.skipped.empty()) {
    std::printf("host-to-device, %d copies of one batch: pinned %.1f GB/s, pageable %.1f GB/s, pinned/pageable %.2fx\n",
                c.copy_reps, bw.pinned_gbps, bw.pageable_gbps,
                bw.pageable_gbps > 0 ? bw.pinned_gbps / bw.pageable_gbps : 0.0);
  } else {
    std::printf("host-to-device bandwidth: skipped (%s)\n", bw.skipped.c_str());
  }
  const double piped = rate(p.images, p.seconds), serial = rate(s.images, s.seconds);
  std::printf("pipelined: %llu batches, %llu images in %.3f s: %.1f images/s\n",
              static_cast<unsigned long long>(p.batches), static_cast<unsigned long long>(p.images), p.seconds, piped);
  std::printf("  compute busy     %5.1f %%  (%.1f ms of %s time%s)\n", busy_pct(p), p.compute.compute_time.count(),
              device.is_cuda() ? "GPU event" : "callable wall", c.streams > 1 ? ", averaged over the streams" : "");
  std::printf("  compute starved  %5.1f %%  (%.1f ms waiting for a batch)\n",
              p.seconds > 0 ? p.starved_ms / (p.seconds * 10.0) : 0.0, p.starved_ms);
  if (device.is_cuda()) {
    std::printf("  copies           %.1f ms, %.1f GB/s", p.transfer.copy_time.count(),
                p.transfer.gigabytes_per_second());
    if (!std::isnan(p.copy_hidden_pct)) std::printf("; %.1f %% of copy time hidden under compute", p.copy_hidden_pct);
    std::printf("\n");
  } else {
    std::printf("  copies           none (the CPU device computes on the host batches)\n");
  }
  std::printf("  slot waits       %llu device, %llu host\n", static_cast<unsigned long long>(p.transfer.slot_waits),
              static_cast<unsigned long long>(p.host_slot_waits));
  if (p.gpu_util_note.empty()) {
    std::printf("  GPU utilization  %5.1f %%  (NVML)\n", p.gpu_util_pct);
  } else {
    std::printf("  GPU utilization  n/a (%s)\n", p.gpu_util_note.c_str());
  }
  std::printf("serial (copy, then compute, one batch at a time): %llu batches in %.3f s: %.1f images/s\n",
              static_cast<unsigned long long>(s.batches), s.seconds, serial);
  std::printf("overlap speedup %.2fx (ideal %.2fx)\n", serial > 0 ? piped / serial : 0.0, ideal_speedup(p));
}

}  // namespace

int bench_device(int argc, char** argv) {
  Config c;
  CommandOptions cli("bench device",
                     "Measures the compute side with synthetic data: (1) host-to-device copies of one batch from\n"
                     "pinned and from pageable memory (CUDA only); (2) a pipeline source -> to-device -> compute ->\n"
                     "sink whose compute stage converts each uint8 NHWC batch (--convert) and runs a synthetic\n"
                     "kernel of --compute-us per batch. Prints images/s, the compute stage's busy and starved time,\n"
                     "and the speedup over the same batches done serially (copy, compute, wait; one at a time).\n"
                     "With --compute-us large next to the copy, the ideal speedup is (copy + compute) / max of them.\n"
                     "Compute busy: the stage's time (GPU events on CUDA, the callable's wall time on the CPU) over\n"
                     "the run's, averaged over the streams; starved: the time it had no batch to work on.\n\n"
                     "  stoke bench device --batch 256 --size 224\n"
                     "  stoke bench device --device cpu --batch 32 --size 64 --batches 50 --compute-us 1000 --json");
  cli.add()("device", po::value(&c.device)->default_value(c.device),
            "auto, cpu, cuda or cuda:N (auto: cuda:0 if usable)")("batch", po::value(&c.batch)->default_value(c.batch),
                                                                  "images per batch")(
      "size", po::value(&c.size)->default_value(c.size), "image side in pixels (square, 3 channels, uint8)")(
      "batches", po::value(&c.batches)->default_value(c.batches), "batches in the pipelined run")(
      "seconds", po::value(&c.seconds), "run the pipeline this long instead of --batches")(
      "compute-us", po::value(&c.compute_us)->default_value(c.compute_us), "synthetic compute per batch, microseconds")(
      "streams", po::value(&c.streams)->default_value(c.streams), "compute streams")(
      "depth", po::value(&c.depth)->default_value(c.depth), "batches enqueued per compute stream at once")(
      "slots", po::value(&c.slots)->default_value(c.slots), "host pool slots = device slots = prefetch depth")(
      "convert", po::value(&c.convert)->default_value(c.convert),
      "none, f32 or bf16: uint8 NHWC -> normalized NCHW on the device before the compute")(
      "copy-reps", po::value(&c.copy_reps)->default_value(c.copy_reps), "copies per bandwidth measurement")(
      "json", po::bool_switch(&c.json), "print one JSON line instead of the table");
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (c.batch <= 0) return cli.usage_error("--batch must be positive");
  if (c.size <= 0) return cli.usage_error("--size must be positive");
  if (values.count("seconds")) {
    if (!values["batches"].defaulted()) return cli.usage_error("give --batches or --seconds, not both");
    if (!(c.seconds > 0)) return cli.usage_error("--seconds must be positive");
    c.batches = 0;
  } else if (c.batches <= 0) {
    return cli.usage_error("--batches must be positive");
  }
  if (c.compute_us < 0) return cli.usage_error("--compute-us must be >= 0");
  if (c.streams < 1 || c.depth < 1 || c.slots < 1 || c.copy_reps < 1)
    return cli.usage_error("--streams, --depth, --slots and --copy-reps must be at least 1");
  if (c.convert != "none" && c.convert != "f32" && c.convert != "bf16")
    return cli.usage_error("--convert must be none, f32 or bf16 (got '" + c.convert + "')");

  const gpu::Device device = gpu::select_device(c.device, &std::cerr);
  nodes::BatchPool pool(shape_of(c), static_cast<std::size_t>(c.slots), gpu::batch_allocator(device));
  fill_pool(pool);
  if (!c.json) std::fprintf(stderr, "bench device: on %s\n", device.str().c_str());
  const Bandwidth bandwidth = measure_bandwidth(c, device);
  run_serial(c, device, pool, 0, 0);  // one untimed batch: the kernels load before anything is timed
  const PipelineResult piped = run_pipeline(c, device, pool);
  if (!c.json) std::fprintf(stderr, "bench device: the same batches serially...\n");
  const SerialResult serial = run_serial(c, device, pool, piped.batches, c.seconds);
  if (c.json) {
    print_json(c, device, bandwidth, piped, serial);
  } else {
    print_text(c, device, bandwidth, piped, serial);
  }
  return 0;
}

}  // namespace stoke::app
