#include "stoke/gpu/nvml_monitor.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>

#include "stoke/gpu/runtime_library.hpp"

#if STOKE_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace stoke::gpu {

namespace {

// The few NVML declarations stoke needs, as nvml.h declares them (its C ABI is stable).
using nvmlReturn_t = int;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
using nvmlClockType_t = int;  // a C enum
constexpr nvmlClockType_t NVML_CLOCK_SM = 1;
constexpr unsigned NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;

// NVML's entry points in one loaded library, or why it could not be loaded.
struct NvmlLibrary : RuntimeLibrary {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*handle_by_pci_bus_id)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*clock)(nvmlDevice_t, nvmlClockType_t, unsigned int*) = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*device_name)(nvmlDevice_t, char*, unsigned int) = nullptr;

  bool resolve_all(std::string& missing) {
    return resolve("nvmlInit_v2", init, missing) && resolve("nvmlShutdown", shutdown, missing) &&
           resolve("nvmlDeviceGetHandleByIndex_v2", handle_by_index, missing) &&
           resolve("nvmlDeviceGetHandleByPciBusId_v2", handle_by_pci_bus_id, missing) &&
           resolve("nvmlDeviceGetUtilizationRates", utilization, missing) &&
           resolve("nvmlDeviceGetMemoryInfo", memory, missing) && resolve("nvmlDeviceGetClockInfo", clock, missing) &&
           resolve("nvmlErrorString", error_string, missing) && resolve("nvmlDeviceGetName", device_name, missing);
  }

  std::string describe(nvmlReturn_t code) const {
    const char* text = error_string(code);
    return (text ? std::string(text) : std::string("unknown error")) + " (NVML error " + std::to_string(code) + ")";
  }
};

// The library named by STOKE_NVML_LIBRARY, or libnvidia-ml.so.1: loaded on first use, then shared.
const NvmlLibrary& nvml_library() {
  static constexpr RuntimeLibrarySpec spec{
      .variable = "STOKE_NVML_LIBRARY",
      .default_name = "libnvidia-ml.so.1",
      .what = "NVML",
      .named_hint = "unset it to use the driver's libnvidia-ml.so.1",
      .default_hint =
          "NVML comes with the NVIDIA driver; if it is installed elsewhere, set STOKE_NVML_LIBRARY to its path",
      .unusable_hint = "is it the NVIDIA driver's libnvidia-ml.so.1?",
  };
  return load_runtime_library<NvmlLibrary>(spec);
}

}  // namespace

struct NvmlMonitor::State {
  Device device;
  std::chrono::milliseconds period;
  std::string unavailable_reason;
  std::string device_name;
  const NvmlLibrary* nvml = nullptr;  // set when NVML was initialized (and must be shut down)
  nvmlDevice_t handle = nullptr;

  mutable std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  // The window, guarded by mutex.
  GpuMonitorStats stats;
  double utilization_sum = 0;
  double clock_sum = 0;

  std::thread thread;

  void open();
  void run();
  void sample();
};

void NvmlMonitor::State::open() {
  if (device.is_cpu()) {
    unavailable_reason = "the CPU device has no NVML: NVML monitors NVIDIA GPUs";
    return;
  }
  const NvmlLibrary& library = nvml_library();
  if (!library.error().empty()) {
    unavailable_reason = library.error();
    return;
  }
  if (const nvmlReturn_t status = library.init(); status != NVML_SUCCESS) {
    unavailable_reason = "nvmlInit_v2 failed: " + library.describe(status);
    return;
  }
  nvml = &library;

#if STOKE_HAS_CUDA
  // NVML numbers devices in its own order and ignores CUDA_VISIBLE_DEVICES: find CUDA's device by
  // its PCI bus id.
  char bus_id[64] = {};
  if (const cudaError_t error = cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device.ordinal()); error != cudaSuccess) {
    (void)cudaGetLastError();
    unavailable_reason = device.str() + " has no PCI bus id from CUDA: " + cudaGetErrorName(error) + " (" +
                         cudaGetErrorString(error) + ")";
    return;
  }
  if (const nvmlReturn_t status = library.handle_by_pci_bus_id(bus_id, &handle); status != NVML_SUCCESS) {
    unavailable_reason =
        "NVML does not know " + device.str() + " (PCI bus id " + bus_id + "): " + library.describe(status);
    handle = nullptr;
    return;
  }
#else
  if (device.ordinal() < 0) {
    unavailable_reason = device.str() + " is not a device ordinal NVML knows";
    return;
  }
  if (const nvmlReturn_t status = library.handle_by_index(static_cast<unsigned>(device.ordinal()), &handle);
      status != NVML_SUCCESS) {
    unavailable_reason = "NVML has no device " + std::to_string(device.ordinal()) + " for " + device.str() + ": " +
                         library.describe(status);
    handle = nullptr;
    return;
  }
#endif

  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  if (library.device_name(handle, name, sizeof name) == NVML_SUCCESS) device_name = name;
}

void NvmlMonitor::State::sample() {
  GpuSample reading;
  reading.when = std::chrono::steady_clock::now();
  nvmlMemory_t memory{};
  const nvmlReturn_t memory_status = nvml->memory(handle, &memory);
  // Utilization and clocks are optional (a MIG-partitioned GPU reports no utilization): 0 then.
  nvmlUtilization_t utilization{};
  if (nvml->utilization(handle, &utilization) == NVML_SUCCESS) {
    reading.utilization_pct = utilization.gpu;
    reading.memory_util_pct = utilization.memory;
  }
  unsigned int clock = 0;
  if (nvml->clock(handle, NVML_CLOCK_SM, &clock) == NVML_SUCCESS) reading.sm_clock_mhz = clock;
  reading.memory_used = memory.used;
  reading.memory_total = memory.total;

  const std::lock_guard lock(mutex);
  if (memory_status != NVML_SUCCESS) {
    ++stats.failed_samples;
    stats.last_error = "nvmlDeviceGetMemoryInfo failed: " + nvml->describe(memory_status);
    return;
  }
  ++stats.samples;
  utilization_sum += reading.utilization_pct;
  clock_sum += reading.sm_clock_mhz;
  const auto count = static_cast<double>(stats.samples);
  stats.mean_utilization_pct = utilization_sum / count;
  stats.mean_sm_clock_mhz = clock_sum / count;
  stats.max_utilization_pct = std::max(stats.max_utilization_pct, reading.utilization_pct);
  stats.peak_memory_used = std::max(stats.peak_memory_used, reading.memory_used);
  stats.memory_total = reading.memory_total;
  stats.last = reading;
}

void NvmlMonitor::State::run() {
  std::unique_lock lock(mutex);
  while (!stopping) {
    lock.unlock();
    sample();  // NVML calls take a while: not under the lock
    lock.lock();
    wake.wait_for(lock, period, [this] { return stopping; });
  }
}

NvmlMonitor::NvmlMonitor(Device device, std::chrono::milliseconds period) : state_(std::make_unique<State>()) {
  state_->device = device;
  state_->period = std::max(period, std::chrono::milliseconds(1));
  state_->open();
  if (state_->unavailable_reason.empty()) {
    try {
      state_->thread = std::thread([state = state_.get()] { state->run(); });
    } catch (const std::system_error& error) {
      state_->unavailable_reason = std::string("could not start the sampling thread: ") + error.what();
    }
  }
  if (!state_->unavailable_reason.empty()) state_->device_name.clear();
}

NvmlMonitor::~NvmlMonitor() {
  if (state_->thread.joinable()) {
    {
      const std::lock_guard lock(state_->mutex);
      state_->stopping = true;
    }
    state_->wake.notify_all();
    state_->thread.join();
  }
  if (state_->nvml != nullptr) state_->nvml->shutdown();
}

bool NvmlMonitor::available() const noexcept { return state_->unavailable_reason.empty(); }

const std::string& NvmlMonitor::unavailable_reason() const noexcept { return state_->unavailable_reason; }

const std::string& NvmlMonitor::device_name() const noexcept { return state_->device_name; }

Device NvmlMonitor::device() const noexcept { return state_->device; }

std::chrono::milliseconds NvmlMonitor::period() const noexcept { return state_->period; }

GpuMonitorStats NvmlMonitor::stats() const {
  const std::lock_guard lock(state_->mutex);
  return state_->stats;
}

void NvmlMonitor::reset() {
  const std::lock_guard lock(state_->mutex);
  GpuMonitorStats fresh;
  fresh.memory_total = state_->stats.memory_total;
  fresh.last = state_->stats.last;
  state_->stats = std::move(fresh);
  state_->utilization_sum = 0;
  state_->clock_sum = 0;
}

}  // namespace stoke::gpu
