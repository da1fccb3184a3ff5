// A stand-in for the driver's libnvidia-ml.so.1 with one device, so that nvml_monitor_test can run
// NvmlMonitor's sampling thread on machines without NVML (it loads this file through
// STOKE_NVML_LIBRARY). Readings follow a fixed pattern: utilization alternates 30% / 70%, memory
// used cycles through 100, 200 and 300 MiB of 1 GiB, the SM clock is 1500 MHz.
#include <atomic>
#include <cstdio>

namespace {

struct Utilization {
  unsigned int gpu;
  unsigned int memory;
};
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

constexpr int success = 0;
constexpr int invalid_argument = 2;
constexpr unsigned long long mib = 1024ull * 1024ull;

int the_device = 0;  // its address is the device handle
std::atomic<int> active{0};
std::atomic<unsigned> utilization_queries{0};
std::atomic<unsigned> memory_queries{0};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int nvmlInit_v2() {
  ++active;
  return success;
}

__attribute__((visibility("default"))) int nvmlShutdown() {
  --active;
  return success;
}

__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index != 0 || device == nullptr) return invalid_argument;
  *device = &the_device;
  return success;
}

__attribute__((visibility("default"))) int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  if (bus_id == nullptr || device == nullptr) return invalid_argument;
  *device = &the_device;
  return success;
}

__attribute__((visibility("default"))) int nvmlDeviceGetUtilizationRates(void* device, Utilization* utilization) {
  if (device != &the_device || utilization == nullptr) return invalid_argument;
  const unsigned n = utilization_queries++;
  utilization->gpu = n % 2 == 0 ? 30 : 70;
  utilization->memory = 10;
  return success;
}

__attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo(void* device, Memory* memory) {
  if (device != &the_device || memory == nullptr) return invalid_argument;
  const unsigned n = memory_queries++;
  memory->total = 1024 * mib;
  memory->used = (n % 3 + 1) * 100 * mib;
  memory->free = memory->total - memory->used;
  return success;
}

__attribute__((visibility("default"))) int nvmlDeviceGetClockInfo(void* device, int type, unsigned int* clock) {
  if (device != &the_device || type != 1 || clock == nullptr) return invalid_argument;
  *clock = 1500;
  return success;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(int code) {
  return code == success ? "Success" : "Invalid Argument";
}

__attribute__((visibility("default"))) int nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  if (device != &the_device || name == nullptr) return invalid_argument;
  std::snprintf(name, length, "%s", "Fake NVML GPU");
  return success;
}

/// For the test: nvmlInit_v2 calls not yet matched by nvmlShutdown.
__attribute__((visibility("default"))) int fake_nvml_active_inits() { return active.load(); }

}  // extern "C"
