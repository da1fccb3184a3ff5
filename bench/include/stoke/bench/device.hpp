// The compute side on its own (`stoke bench device`), with synthetic batches and a synthetic
// kernel of known cost: host-to-device bandwidth of one batch from pinned and from pageable
// memory, then source -> to-device -> compute -> sink as a pipeline against the same batches done
// serially (copy, convert, compute, wait; one at a time) for the overlap speedup.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <stoke/gpu/compute.hpp>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/dtype.hpp>
#include <stoke/gpu/to_device.hpp>
#include <stoke/nodes/batch.hpp>
#include <string>

namespace stoke::bench {

struct DeviceBenchOptions {
  int batch = 256;              ///< images per batch
  int size = 224;               ///< image side in pixels (square, 3 channels, uint8 NHWC)
  std::uint64_t batches = 200;  ///< batches in the pipelined run; 0: until `seconds`
  double seconds = 0;           ///< > 0: run the pipeline (and the serial loop) this long at most
  int compute_us = 2000;        ///< synthetic compute per batch, microseconds
  int streams = 1;              ///< compute streams
  int depth = 2;                ///< batches enqueued per compute stream at once
  int slots = 4;                ///< host pool slots = device slots = prefetch depth
  /// uint8 NHWC -> normalized NCHW of this type on the device before the compute (f32 or bf16);
  /// nullopt: none.
  std::optional<gpu::DType> convert = gpu::DType::f32;
  int copy_reps = 20;  ///< copies per bandwidth measurement
};

/// The shape of one batch of `options`.
nodes::BatchShape batch_shape(const DeviceBenchOptions& options);

/// Host-to-device copies of one batch, timed with events (CUDA only).
struct Bandwidth {
  std::string skipped{};  ///< why it was not measured; empty when it was
  double pinned_gbps = 0;
  double pageable_gbps = 0;
  double pinned_over_pageable() const noexcept { return pageable_gbps > 0 ? pinned_gbps / pageable_gbps : 0.0; }
};

/// The pipelined run.
struct PipelinedRun {
  std::uint64_t batches = 0;
  std::uint64_t images = 0;
  double seconds = 0;  ///< run()'s whole wall time
  gpu::ComputeStats compute{};
  gpu::TransferStats transfer{};
  double starved_ms = 0;  ///< the compute stage, idle for want of a batch
  std::uint64_t host_slot_waits = 0;
  double copy_hidden_pct = std::numeric_limits<double>::quiet_NaN();  ///< copy time under compute; NaN: n/a
  double gpu_util_pct = std::numeric_limits<double>::quiet_NaN();     ///< NVML's mean; NaN: see the note
  std::string gpu_util_note{};  ///< why there is no utilization figure; empty when there is
};

/// The same batches one at a time.
struct SerialRun {
  std::uint64_t batches = 0;
  std::uint64_t images = 0;
  double seconds = 0;
};

struct DeviceBenchResult {
  DeviceBenchOptions options{};  ///< as given
  gpu::Device device{};          ///< the device measured
  Bandwidth bandwidth{};
  PipelinedRun pipelined{};
  SerialRun serial{};

  double images_per_sec() const noexcept;
  double serial_images_per_sec() const noexcept;
  /// Pipelined over serial images/s; 0 when the serial run did nothing.
  double overlap_speedup() const noexcept;
  /// (copy + compute) / max(copy, compute) per batch: what perfect overlap would gain.
  double ideal_speedup() const noexcept;
  /// Compute time over wall time, per stream, in percent: 100 means every stream always busy.
  double compute_busy_pct() const noexcept;
  double compute_starved_pct() const noexcept;
};

/// The result as one JSON object (`stoke bench device --json`): "bench":"device", the device and
/// options, "bandwidth" (measured or why not), the pipelined run's figures, the serial run's and
/// the speedups. NaN figures (no timeline, no NVML) are null.
void to_json(nlohmann::ordered_json& json, const DeviceBenchResult& result);

/// Progress of measure_device(), for a log.
struct DeviceBenchCallbacks {
  /// Once a second during the pipelined run, from a side thread: images so far, seconds.
  std::function<void(std::uint64_t images, double seconds)> progress{};
  /// Before the serial run, on the calling thread.
  std::function<void()> serial_starts{};
};

/// Measures `device` (gpu::select_device's choice): the bandwidth (on the CPU device: skipped,
/// nothing crosses), one untimed serial batch (kernels load before anything is timed), the
/// pipelined run, then as many batches serially. Throws std::invalid_argument for options out of
/// range (non-positive sizes or counts, neither batches nor seconds), gpu::DeviceError from the
/// device. Measures the machine: run one benchmark at a time.
DeviceBenchResult measure_device(gpu::Device device, const DeviceBenchOptions& options,
                                 const DeviceBenchCallbacks& callbacks = {});

}  // namespace stoke::bench
