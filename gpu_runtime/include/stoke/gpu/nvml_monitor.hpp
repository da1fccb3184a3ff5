// NvmlMonitor: samples a GPU's utilization, memory and SM clock in the background with NVML, for
// progress bars ("GPU busy 97%") and run reports. NVML comes with the NVIDIA driver
// (libnvidia-ml.so.1) and is loaded at run time with dlopen: stoke neither links it nor needs its
// header, and a machine without it simply has no monitor.
//
//   stoke::gpu::NvmlMonitor monitor(device);   // never throws for a missing NVML or the CPU
//   ...                                        // train
//   if (monitor.available()) {
//     const stoke::gpu::GpuMonitorStats s = monitor.stats();
//     std::cerr << "GPU busy " << s.mean_utilization_pct << "%\n";
//     monitor.reset();                         // the next report covers the next interval
//   } else {
//     std::cerr << "no GPU monitor: " << monitor.unavailable_reason() << '\n';
//   }
//
// The library is libnvidia-ml.so.1 unless the environment variable STOKE_NVML_LIBRARY names
// another file (a path or a name for dlopen's search), read by each constructor. Each library is
// loaded once per process and stays loaded.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "stoke/gpu/device.hpp"

namespace stoke::gpu {

/// One reading of a device.
struct GpuSample {
  std::chrono::steady_clock::time_point when;
  /// Percent of the driver's last sample period (1/6 s to 1 s, by device) during which a kernel
  /// ran. 0 when the device does not report it (a MIG-partitioned GPU).
  unsigned utilization_pct = 0;
  /// Percent of that period during which device memory was read or written. 0 when not reported.
  unsigned memory_util_pct = 0;
  std::uint64_t memory_used = 0;   ///< bytes, by every process on the device
  std::uint64_t memory_total = 0;  ///< bytes
  unsigned sm_clock_mhz = 0;       ///< current SM clock; 0 when not reported
};

/// What a monitor has seen since it started or since its last reset().
struct GpuMonitorStats {
  std::size_t samples = 0;
  double mean_utilization_pct = 0;  ///< over the samples
  unsigned max_utilization_pct = 0;
  std::uint64_t peak_memory_used = 0;  ///< bytes
  std::uint64_t memory_total = 0;      ///< bytes; kept across reset()
  double mean_sm_clock_mhz = 0;        ///< over the samples
  /// The most recent sample, also when taken before the last reset(); empty before the first.
  std::optional<GpuSample> last;
  /// Readings NVML refused (its memory query failed), not counted in `samples`, and why the last
  /// one was refused (empty when none was).
  std::size_t failed_samples = 0;
  std::string last_error;
};

/// Samples one device every `period` on a background thread, from construction to destruction.
///
/// The CUDA device cuda:N is found in NVML by its PCI bus id in a build with CUDA, so that NVML's
/// own device order and CUDA_VISIBLE_DEVICES do not matter; in a build without CUDA, cuda:N is
/// NVML's device N (the same device when CUDA_DEVICE_ORDER=PCI_BUS_ID and CUDA_VISIBLE_DEVICES is
/// unset).
///
/// Thread-safe: stats() and reset() may be called from any thread. Not copyable or movable.
class NvmlMonitor {
 public:
  /// Starts sampling `device` (the first sample at once, then every `period`). Never throws for a
  /// missing or failing NVML, the CPU device or a device NVML does not know: the monitor is then
  /// unavailable and unavailable_reason() says why. A period below 1 ms counts as 1 ms.
  explicit NvmlMonitor(Device device, std::chrono::milliseconds period = std::chrono::milliseconds(100));
  /// Stops the thread (at once, without waiting for the period to end) and joins it.
  ~NvmlMonitor();
  NvmlMonitor(const NvmlMonitor&) = delete;
  NvmlMonitor& operator=(const NvmlMonitor&) = delete;
  NvmlMonitor(NvmlMonitor&&) = delete;
  NvmlMonitor& operator=(NvmlMonitor&&) = delete;

  /// True when the device is being sampled.
  bool available() const noexcept;
  /// Why it is not, e.g. "libnvidia-ml.so.1 not found (...); NVML comes with the NVIDIA driver",
  /// "the CPU device has no NVML: NVML monitors NVIDIA GPUs"; empty when available().
  const std::string& unavailable_reason() const noexcept;
  /// NVML's name of the device, e.g. "NVIDIA H200"; empty when unavailable.
  const std::string& device_name() const noexcept;
  Device device() const noexcept;
  std::chrono::milliseconds period() const noexcept;

  /// A consistent snapshot of the current window (all zero when unavailable).
  GpuMonitorStats stats() const;
  /// Starts a new averaging window: samples, means, maxima and failures start again from zero.
  void reset();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace stoke::gpu
