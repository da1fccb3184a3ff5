#include "stoke/gpu/device.hpp"

#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <ostream>
#include <system_error>
#include <thread>

#include "internal.hpp"
#include "stoke/gpu/error.hpp"

#if STOKE_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace stoke::gpu {
namespace {

// "Intel(R) Xeon(R) ..." from /proc/cpuinfo's first "model name", or "CPU" where there is none
// (other architectures, other systems).
std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (!line.starts_with("model name")) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    const auto begin = line.find_first_not_of(" \t", colon + 1);
    if (begin == std::string::npos) break;
    return line.substr(begin);
  }
  return "CPU";
}

std::size_t physical_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_size);
}

#if STOKE_HAS_CUDA
std::string cuda_version_string(int version) {  // 13000 -> "13.0"
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string no_visible_device(const char* code_name) {
  std::string reason = "no GPU: the NVIDIA driver sees no CUDA device (";
  reason += code_name;
  reason += "; check CUDA_VISIBLE_DEVICES";
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) reason += std::string(", now '") + visible + "'";
  return reason + ")";
}

// A failed cudaGetDevice/cudaSetDevice: DeviceError when the device cannot be used at all (no
// driver, no such device), CudaError for anything else.
[[noreturn]] void throw_device_call_failure(cudaError_t error, Device device, const char* call, int line) {
  (void)cudaGetLastError();
  if (device.ordinal() < 0 || device.ordinal() >= cuda_device_count())
    throw DeviceError(detail::missing_device_message(device));
  detail::throw_cuda_error(error, call, __FILE__, line);
}
#endif

}  // namespace

// ---- names -----------------------------------------------------------------------------------

std::string Device::str() const {
  if (is_cpu()) return "cpu";
  return "cuda:" + std::to_string(ordinal_);
}

std::ostream& operator<<(std::ostream& out, const Device& device) { return out << device.str(); }

std::string DeviceInfo::describe() const {
  std::string line = device.str() + " " + name + " (";
  if (device.is_cuda()) {
    line += "sm_" + std::to_string(compute_major) + std::to_string(compute_minor) + ", " +
            std::to_string(multiprocessors) + " SMs, ";
  } else {
    line += std::to_string(multiprocessors) + " threads, ";
  }
  return line + detail::format_bytes(total_memory) + ")";
}

Device parse_device(std::string_view spec) {
  if (spec == "cpu") return Device::cpu();
  if (spec == "cuda") return Device::cuda(0);
  constexpr std::string_view prefix = "cuda:";
  if (spec.starts_with(prefix) && spec.size() > prefix.size()) {
    const std::string_view digits = spec.substr(prefix.size());
    int ordinal = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
    if (error == std::errc{} && end == digits.data() + digits.size() && digits.front() >= '0' && digits.front() <= '9')
      return Device::cuda(ordinal);
  }
  if (spec == "auto")
    throw DeviceError(
        "invalid device 'auto' here: 'auto' is resolved by select_device(); parse_device() reads cpu, "
        "cuda or cuda:N");
  throw DeviceError("invalid device '" + std::string(spec) + "': expected cpu, cuda, cuda:N or auto");
}

// ---- what this machine has -------------------------------------------------------------------

bool built_with_cuda() noexcept { return STOKE_HAS_CUDA != 0; }

int cuda_device_count() noexcept {
#if STOKE_HAS_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

std::string cuda_unavailable_reason() {
#if STOKE_HAS_CUDA
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  if (error == cudaSuccess && count > 0) return {};
  if (error == cudaSuccess || error == cudaErrorNoDevice) return no_visible_device("cudaErrorNoDevice");
  if (error == cudaErrorInsufficientDriver) {
    // CUDA reports both a missing driver and an old one so; the driver's version tells them apart
    // (0: no driver library, libcuda.so.1, could be loaded).
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) (void)cudaGetLastError();
    if (driver == 0) return "no GPU: no NVIDIA driver is installed (libcuda.so.1 was not found)";
    return "the NVIDIA driver is too old: it supports CUDA up to " + cuda_version_string(driver) +
           ", and this stoke was built with CUDA " + cuda_version_string(CUDART_VERSION) + " (update the driver)";
  }
  return std::string("CUDA cannot be initialized (") + cudaGetErrorName(error) + ": " + cudaGetErrorString(error) + ")";
#else
  return "no GPU support: this stoke was built without CUDA (configure with -DSTOKE_CUDA=ON and the CUDA toolkit "
         "installed)";
#endif
}

DeviceInfo device_info(Device device) {
  DeviceInfo info;
  info.device = device;
  if (device.is_cpu()) {
    info.name = cpu_model_name();
    info.multiprocessors = static_cast<int>(std::thread::hardware_concurrency());
    info.total_memory = physical_memory();
    return info;
  }
  if (device.ordinal() < 0 || device.ordinal() >= cuda_device_count())
    throw DeviceError(detail::missing_device_message(device));
#if STOKE_HAS_CUDA
  cudaDeviceProp properties{};
  STOKE_CUDA_CHECK(cudaGetDeviceProperties(&properties, device.ordinal()));
  info.name = properties.name;
  info.total_memory = properties.totalGlobalMem;
  info.compute_major = properties.major;
  info.compute_minor = properties.minor;
  info.multiprocessors = properties.multiProcessorCount;
#endif
  return info;
}

Device select_device(std::string_view spec, std::ostream* log) {
  if (spec == "auto") {
    if (cuda_device_count() > 0) return Device::cuda(0);
    if (log != nullptr) *log << "stoke: " << cuda_unavailable_reason() << "; running on the CPU\n";
    return Device::cpu();
  }
  const Device device = parse_device(spec);
  if (device.is_cpu() && log != nullptr) *log << "stoke: running on the CPU, as asked (--device cpu)\n";
  if (device.is_cuda() && device.ordinal() >= cuda_device_count())
    throw DeviceError(detail::missing_device_message(device));
  return device;
}

// ---- DeviceGuard -----------------------------------------------------------------------------

#if STOKE_HAS_CUDA
DeviceGuard::DeviceGuard(Device device) {
  if (!device.is_cuda()) return;
  int current = 0;
  if (const cudaError_t error = cudaGetDevice(&current); error != cudaSuccess)
    throw_device_call_failure(error, device, "cudaGetDevice(&current)", __LINE__);
  if (current == device.ordinal()) return;
  if (const cudaError_t error = cudaSetDevice(device.ordinal()); error != cudaSuccess)
    throw_device_call_failure(error, device, "cudaSetDevice(device.ordinal())", __LINE__);
  previous_ = current;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) STOKE_CUDA_REPORT(cudaSetDevice(previous_));
}
#else
DeviceGuard::DeviceGuard(Device device) {
  if (device.is_cuda()) throw DeviceError(detail::missing_device_message(device));
}

DeviceGuard::~DeviceGuard() = default;
#endif

// ---- private helpers (internal.hpp) ----------------------------------------------------------

std::string detail::format_bytes(std::size_t bytes) {
  constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(units)) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
  return text;
}

void detail::require_cuda_device(Device device, const char* what) {
  if (!device.is_cuda())
    throw DeviceError(std::string(what) + " needs a CUDA device, not the CPU (" + device.str() +
                      "); on the CPU, work runs on StreamView::host()");
}

std::string detail::missing_device_message(Device device) {
  const int count = cuda_device_count();
  if (count == 0) return device.str() + " cannot be used: " + cuda_unavailable_reason();
  std::string message = device.str() + " does not exist: this machine has " + std::to_string(count) + " CUDA device" +
                        (count == 1 ? "" : "s") + " (cuda:0";
  if (count == 2) message += ", cuda:1";
  if (count > 2) message += " to cuda:" + std::to_string(count - 1);
  return message + ")";
}

}  // namespace stoke::gpu
