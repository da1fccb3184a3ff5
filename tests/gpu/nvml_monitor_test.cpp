// NvmlMonitor without NVML: unavailable with a reason naming the library (the default one when the
// machine has no driver, or the file STOKE_NVML_LIBRARY names), no samples, prompt destruction
// even with a long period; the CPU device is unavailable with its own reason. And with a stand-in
// NVML (fake_nvml.cpp, loaded through STOKE_NVML_LIBRARY): samples in the background, the window's
// statistics, reset(), prompt destruction of a running monitor, nvmlShutdown for every nvmlInit.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/nvml_monitor.hpp>
#include <string>
#include <thread>

#include "scoped_environment.hpp"
#include "temp_dir.hpp"

namespace stoke::gpu {
namespace {

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

using stoke::test::ScopedEnvironment;

void expect_no_samples(const NvmlMonitor& monitor) {
  const GpuMonitorStats stats = monitor.stats();
  EXPECT_EQ(stats.samples, 0u);
  EXPECT_EQ(stats.failed_samples, 0u);
  EXPECT_EQ(stats.mean_utilization_pct, 0.0);
  EXPECT_EQ(stats.max_utilization_pct, 0u);
  EXPECT_EQ(stats.peak_memory_used, 0u);
  EXPECT_EQ(stats.memory_total, 0u);
  EXPECT_FALSE(stats.last.has_value());
}

TEST(NvmlMonitor, WithoutTheDriversLibraryItIsUnavailableAndSaysWhy) {
  ScopedEnvironment no_override("STOKE_NVML_LIBRARY", "");  // the default library name
  NvmlMonitor monitor(Device::cuda(0), std::chrono::milliseconds(10));
  if (monitor.available()) GTEST_SKIP() << "this machine has NVML (" << monitor.device_name() << ")";
  EXPECT_FALSE(monitor.unavailable_reason().empty());
  if (!contains(monitor.unavailable_reason(), "not found")) {
    GTEST_SKIP() << "NVML is here but unusable: " << monitor.unavailable_reason();
  }
  EXPECT_TRUE(contains(monitor.unavailable_reason(), "libnvidia-ml.so.1")) << monitor.unavailable_reason();
  EXPECT_TRUE(contains(monitor.unavailable_reason(), "STOKE_NVML_LIBRARY")) << monitor.unavailable_reason();
  EXPECT_TRUE(monitor.device_name().empty());
  EXPECT_EQ(monitor.device(), Device::cuda(0));
  expect_no_samples(monitor);
  monitor.reset();
  expect_no_samples(monitor);
}

TEST(NvmlMonitor, ALibraryNamedByTheEnvironmentThatDoesNotExistIsNamed) {
  const std::string path = "/nonexistent/stoke-test/libnvidia-ml-missing.so";
  ScopedEnvironment variable("STOKE_NVML_LIBRARY", path);
  const NvmlMonitor monitor(Device::cuda(0));
  EXPECT_FALSE(monitor.available());
  EXPECT_TRUE(contains(monitor.unavailable_reason(), path + " not found")) << monitor.unavailable_reason();
  EXPECT_TRUE(contains(monitor.unavailable_reason(), "named by STOKE_NVML_LIBRARY")) << monitor.unavailable_reason();
  expect_no_samples(monitor);
}

TEST(NvmlMonitor, ALibraryWithoutNvmlsFunctionsIsRefused) {
  // A real shared library that is not NVML: the C library.
  ScopedEnvironment variable("STOKE_NVML_LIBRARY", "libc.so.6");
  const NvmlMonitor monitor(Device::cuda(0));
  EXPECT_FALSE(monitor.available());
  EXPECT_TRUE(contains(monitor.unavailable_reason(), "libc.so.6 is not a usable NVML")) << monitor.unavailable_reason();
  EXPECT_TRUE(contains(monitor.unavailable_reason(), "nvmlInit_v2 is missing")) << monitor.unavailable_reason();
  expect_no_samples(monitor);
}

TEST(NvmlMonitor, ANonLibraryFileIsRefused) {
  const stoke::test::TempDir dir;  // its own folder: ctest runs tests in parallel processes
  const std::filesystem::path file = dir / "not_a_library.so";
  std::ofstream(file) << "not an ELF file\n";
  ScopedEnvironment variable("STOKE_NVML_LIBRARY", file.string());
  const NvmlMonitor monitor(Device::cuda(0));
  EXPECT_FALSE(monitor.available());
  EXPECT_TRUE(contains(monitor.unavailable_reason(), file.string())) << monitor.unavailable_reason();
}

TEST(NvmlMonitor, TheCpuDeviceHasNoNvml) {
  const NvmlMonitor monitor(Device::cpu());
  EXPECT_FALSE(monitor.available());
  EXPECT_TRUE(contains(monitor.unavailable_reason(), "the CPU device has no NVML")) << monitor.unavailable_reason();
  EXPECT_EQ(monitor.device(), Device::cpu());
  expect_no_samples(monitor);
}

TEST(NvmlMonitor, ConstructionAndDestructionDoNotWaitForTheSamplingPeriod) {
  // A liveness check, not a timing test: with a 10 s period, the destructor must not wait it out
  // (the sampling thread waits on a condition variable that the destructor signals). Generous
  // bound; on a machine with NVML this covers the running thread too.
  const auto start = std::chrono::steady_clock::now();
  for (const Device device : {Device::cuda(0), Device::cpu()}) {
    const NvmlMonitor monitor(device, std::chrono::seconds(10));
    EXPECT_EQ(monitor.period(), std::chrono::seconds(10));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(NvmlMonitor, APeriodBelowOneMillisecondCountsAsOne) {
  const NvmlMonitor monitor(Device::cpu(), std::chrono::milliseconds(0));
  EXPECT_EQ(monitor.period(), std::chrono::milliseconds(1));
}

#ifdef STOKE_TEST_FAKE_NVML
// The stand-in's count of nvmlInit_v2 calls not matched by nvmlShutdown.
int fake_nvml_active_inits() {
  void* library = dlopen(STOKE_TEST_FAKE_NVML, RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) return -1;
  auto* count = reinterpret_cast<int (*)()>(dlsym(library, "fake_nvml_active_inits"));
  const int active = count != nullptr ? count() : -1;
  dlclose(library);
  return active;
}

// Polls until the monitor has `samples` samples, for at most 10 s (a liveness bound).
GpuMonitorStats wait_for_samples(const NvmlMonitor& monitor, std::size_t samples) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  GpuMonitorStats stats = monitor.stats();
  while (stats.samples < samples && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    stats = monitor.stats();
  }
  return stats;
}

// In a build with CUDA, cuda:0 is looked up in NVML by the PCI bus id CUDA gives, which needs a
// CUDA device.
bool skip_without_bus_id(const NvmlMonitor& monitor) {
  return !monitor.available() && contains(monitor.unavailable_reason(), "PCI bus id");
}

TEST(NvmlMonitor, SamplesAStandInNvmlInTheBackground) {
  ScopedEnvironment variable("STOKE_NVML_LIBRARY", STOKE_TEST_FAKE_NVML);
  constexpr std::uint64_t mib = 1024 * 1024;
  {
    const NvmlMonitor monitor(Device::cuda(0), std::chrono::milliseconds(1));
    if (skip_without_bus_id(monitor)) GTEST_SKIP() << monitor.unavailable_reason();
    ASSERT_TRUE(monitor.available()) << monitor.unavailable_reason();
    EXPECT_EQ(monitor.device_name(), "Fake NVML GPU");
    EXPECT_EQ(fake_nvml_active_inits(), 1);

    const GpuMonitorStats stats = wait_for_samples(monitor, 6);
    ASSERT_GE(stats.samples, 6u);
    EXPECT_EQ(stats.failed_samples, 0u);
    EXPECT_TRUE(stats.last_error.empty());
    // The stand-in alternates 30% and 70% and cycles memory through 100, 200, 300 MiB of 1 GiB.
    EXPECT_EQ(stats.max_utilization_pct, 70u);
    EXPECT_GT(stats.mean_utilization_pct, 30.0);
    EXPECT_LT(stats.mean_utilization_pct, 70.0);
    EXPECT_EQ(stats.peak_memory_used, 300 * mib);
    EXPECT_EQ(stats.memory_total, 1024 * mib);
    EXPECT_EQ(stats.mean_sm_clock_mhz, 1500.0);
    ASSERT_TRUE(stats.last.has_value());
    EXPECT_EQ(stats.last->memory_total, 1024 * mib);
    EXPECT_EQ(stats.last->memory_util_pct, 10u);
    EXPECT_EQ(stats.last->sm_clock_mhz, 1500u);
  }
  EXPECT_EQ(fake_nvml_active_inits(), 0) << "every nvmlInit_v2 must be matched by nvmlShutdown";
}

TEST(NvmlMonitor, ResetStartsANewWindowAndARunningMonitorStopsAtOnce) {
  ScopedEnvironment variable("STOKE_NVML_LIBRARY", STOKE_TEST_FAKE_NVML);
  const auto start = std::chrono::steady_clock::now();
  {
    // The first sample is taken at once; the next one would come 10 s later.
    NvmlMonitor monitor(Device::cuda(0), std::chrono::seconds(10));
    if (skip_without_bus_id(monitor)) GTEST_SKIP() << monitor.unavailable_reason();
    ASSERT_TRUE(monitor.available()) << monitor.unavailable_reason();
    const GpuMonitorStats first = wait_for_samples(monitor, 1);
    ASSERT_EQ(first.samples, 1u);

    monitor.reset();
    const GpuMonitorStats fresh = monitor.stats();
    EXPECT_EQ(fresh.samples, 0u);
    EXPECT_EQ(fresh.mean_utilization_pct, 0.0);
    EXPECT_EQ(fresh.max_utilization_pct, 0u);
    EXPECT_EQ(fresh.peak_memory_used, 0u);
    EXPECT_EQ(fresh.mean_sm_clock_mhz, 0.0);
    // Kept across reset(): the device's total memory and the most recent sample.
    EXPECT_EQ(fresh.memory_total, first.memory_total);
    ASSERT_TRUE(fresh.last.has_value());
    EXPECT_EQ(fresh.last->when, first.last->when);
  }
  // The destructor woke the thread in the middle of its 10 s wait (a liveness bound, not a timing).
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(fake_nvml_active_inits(), 0);
}
#endif

}  // namespace
}  // namespace stoke::gpu
