// `stoke bench device`: the compute side on its own, with synthetic batches and a synthetic
// kernel of known cost (bench::measure_device): host-to-device copies of one batch from pinned and
// pageable memory, then source -> to-device -> compute -> sink against the same batches done
// serially. This file parses the options and prints.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stoke/bench/device.hpp>
#include <string>

#include "cli.hpp"
#include "commands.hpp"
#include "status_line.hpp"

namespace stoke::app {
namespace {

namespace po = boost::program_options;

struct DeviceBenchConfig {
  std::string device = "auto";
  bench::DeviceBenchOptions bench;
  std::string convert = "f32";
  bool json = false;
};

std::string format_size(std::size_t bytes) {
  const double kib = static_cast<double>(bytes) / 1024.0;
  return kib < 1024 ? format("%.1f KiB", kib) : format("%.1f MiB", kib / 1024.0);
}

void print_device_text(const bench::DeviceBenchResult& r, const std::string& convert) {
  const bench::DeviceBenchOptions& o = r.options;
  const gpu::Device device = r.device;
  const bench::Bandwidth& bw = r.bandwidth;
  const bench::PipelinedRun& p = r.pipelined;
  const nodes::BatchShape shape = bench::batch_shape(o);
  std::printf("device %s\n", gpu::device_info(device).describe().c_str());
  std::printf("batches of %s (%s), convert %s, synthetic compute %d us, %d stream%s x depth %d, %d slots\n",
              shape.describe().c_str(), format_size(shape.data_bytes()).c_str(), convert.c_str(), o.compute_us,
              o.streams, o.streams == 1 ? "" : "s", o.depth, o.slots);
  if (bw.skipped.empty()) {
    std::printf("host-to-device, %d copies of one batch: pinned %.1f GB/s, pageable %.1f GB/s, pinned/pageable %.2fx\n",
                o.copy_reps, bw.pinned_gbps, bw.pageable_gbps, bw.pinned_over_pageable());
  } else {
    std::printf("host-to-device bandwidth: skipped (%s)\n", bw.skipped.c_str());
  }
  std::printf("pipelined: %llu batches, %llu images in %.3f s: %.1f images/s\n",
              static_cast<unsigned long long>(p.batches), static_cast<unsigned long long>(p.images), p.seconds,
              r.images_per_sec());
  std::printf("  compute busy     %5.1f %%  (%.1f ms of %s time%s)\n", r.compute_busy_pct(),
              p.compute.compute_time.count(), device.is_cuda() ? "GPU event" : "callable wall",
              o.streams > 1 ? ", averaged over the streams" : "");
  std::printf("  compute starved  %5.1f %%  (%.1f ms waiting for a batch)\n", r.compute_starved_pct(), p.starved_ms);
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
              static_cast<unsigned long long>(r.serial.batches), r.serial.seconds, r.serial_images_per_sec());
  std::printf("overlap speedup %.2fx (ideal %.2fx)\n", r.overlap_speedup(), r.ideal_speedup());
}

}  // namespace

int bench_device(int argc, char** argv) {
  DeviceBenchConfig c;
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
  bench::DeviceBenchOptions& o = c.bench;
  std::int64_t batches = static_cast<std::int64_t>(o.batches);
  cli.add()("device", po::value(&c.device)->default_value(c.device),
            "auto, cpu, cuda or cuda:N (auto: cuda:0 if usable)")("batch", po::value(&o.batch)->default_value(o.batch),
                                                                  "images per batch")(
      "size", po::value(&o.size)->default_value(o.size), "image side in pixels (square, 3 channels, uint8)")(
      "batches", po::value(&batches)->default_value(batches), "batches in the pipelined run")(
      "seconds", po::value(&o.seconds), "run the pipeline this long instead of --batches")(
      "compute-us", po::value(&o.compute_us)->default_value(o.compute_us), "synthetic compute per batch, microseconds")(
      "streams", po::value(&o.streams)->default_value(o.streams), "compute streams")(
      "depth", po::value(&o.depth)->default_value(o.depth), "batches enqueued per compute stream at once")(
      "slots", po::value(&o.slots)->default_value(o.slots), "host pool slots = device slots = prefetch depth")(
      "convert", po::value(&c.convert)->default_value(c.convert),
      "none, f32 or bf16: uint8 NHWC -> normalized NCHW on the device before the compute")(
      "copy-reps", po::value(&o.copy_reps)->default_value(o.copy_reps), "copies per bandwidth measurement")(
      "json", po::bool_switch(&c.json), "print one JSON line instead of the table");
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (o.batch <= 0) return cli.usage_error("--batch must be positive");
  if (o.size <= 0) return cli.usage_error("--size must be positive");
  if (values.count("seconds")) {
    if (!values["batches"].defaulted()) return cli.usage_error("give --batches or --seconds, not both");
    if (!(o.seconds > 0)) return cli.usage_error("--seconds must be positive");
    batches = 0;
  } else if (batches <= 0) {
    return cli.usage_error("--batches must be positive");
  }
  if (o.compute_us < 0) return cli.usage_error("--compute-us must be >= 0");
  if (o.streams < 1 || o.depth < 1 || o.slots < 1 || o.copy_reps < 1)
    return cli.usage_error("--streams, --depth, --slots and --copy-reps must be at least 1");
  if (c.convert != "none" && c.convert != "f32" && c.convert != "bf16")
    return cli.usage_error("--convert must be none, f32 or bf16 (got '" + c.convert + "')");
  o.batches = static_cast<std::uint64_t>(batches);
  o.convert =
      c.convert == "none" ? std::nullopt : std::optional(c.convert == "bf16" ? gpu::DType::bf16 : gpu::DType::f32);

  const gpu::Device device = gpu::select_device(c.device, &std::cerr);
  if (!c.json) std::fprintf(stderr, "bench device: on %s\n", device.str().c_str());
  StatusLine line(std::chrono::seconds(0), std::chrono::seconds(0));  // a line per progress call: every second
  bench::DeviceBenchCallbacks callbacks;
  if (!c.json) {
    callbacks.progress = [&line](std::uint64_t images, double t) {
      line.show([&] {
        return format("bench device: %llu images, %.1f images/s, %.0f s", static_cast<unsigned long long>(images),
                      t > 0 ? static_cast<double>(images) / t : 0.0, t);
      });
    };
    callbacks.serial_starts = [&line] { line.print("bench device: the same batches serially..."); };
  }
  const bench::DeviceBenchResult result = bench::measure_device(device, o, callbacks);
  if (c.json) {
    print_json(result);
  } else {
    print_device_text(result, c.convert);
  }
  return 0;
}

}  // namespace stoke::app
