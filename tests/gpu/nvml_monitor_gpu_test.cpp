// NvmlMonitor with NVML (a machine with the NVIDIA driver): samples arrive at the period, with the
// device's memory, and reset() starts a new window. Skips where NVML is not available.
#include <gtest/gtest.h>

#include <chrono>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/nvml_monitor.hpp>
#include <thread>

namespace stoke::gpu {
namespace {

TEST(NvmlMonitorGpu, SamplesTheDevice) {
  // NVML needs the driver, not CUDA: this also runs in a build without CUDA (cuda:0 is then NVML's
  // device 0).
  NvmlMonitor monitor(Device::cuda(0), std::chrono::milliseconds(50));
  if (!monitor.available()) GTEST_SKIP() << "NVML is not available: " << monitor.unavailable_reason();
  EXPECT_TRUE(monitor.unavailable_reason().empty());
  EXPECT_FALSE(monitor.device_name().empty());

  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const GpuMonitorStats stats = monitor.stats();
  EXPECT_GT(stats.samples, 0u) << "failed samples: " << stats.failed_samples << " (" << stats.last_error << ")";
  EXPECT_GT(stats.memory_total, 0u);
  EXPECT_LE(stats.peak_memory_used, stats.memory_total);
  EXPECT_LE(stats.max_utilization_pct, 100u);
  EXPECT_LE(stats.mean_utilization_pct, static_cast<double>(stats.max_utilization_pct));
  ASSERT_TRUE(stats.last.has_value());
  EXPECT_EQ(stats.last->memory_total, stats.memory_total);
  EXPECT_LE(stats.last->when, std::chrono::steady_clock::now());

  monitor.reset();
  const GpuMonitorStats fresh = monitor.stats();
  EXPECT_LE(fresh.samples, 1u);  // a sample may land between reset() and stats()
  EXPECT_EQ(fresh.memory_total, stats.memory_total);
  EXPECT_TRUE(fresh.last.has_value());
}

}  // namespace
}  // namespace stoke::gpu
