// Device: where compute runs, a CUDA device or the CPU, chosen at run time.
//
//   stoke::gpu::Device device = stoke::gpu::select_device("auto");  // cuda:0, or the CPU (logged)
//   stoke::gpu::Device gpu1 = stoke::gpu::select_device("cuda:1");  // DeviceError if absent
#pragma once

#include <cstddef>
#include <iosfwd>
#include <string>
#include <string_view>

namespace stoke::gpu {

enum class DeviceKind { cpu, cuda };

/// A value naming a device; cheap to copy. Says nothing about whether the device exists: use
/// select_device() to get one that does.
class Device {
 public:
  /// The CPU.
  constexpr Device() noexcept = default;
  static constexpr Device cpu() noexcept { return {}; }
  static constexpr Device cuda(int ordinal) noexcept { return Device(DeviceKind::cuda, ordinal); }

  constexpr DeviceKind kind() const noexcept { return kind_; }
  constexpr bool is_cuda() const noexcept { return kind_ == DeviceKind::cuda; }
  constexpr bool is_cpu() const noexcept { return kind_ == DeviceKind::cpu; }
  /// The CUDA ordinal; -1 for the CPU.
  constexpr int ordinal() const noexcept { return ordinal_; }
  /// "cpu" or "cuda:N", the form parse_device() reads.
  std::string str() const;

  friend constexpr bool operator==(const Device&, const Device&) = default;

 private:
  constexpr Device(DeviceKind kind, int ordinal) noexcept : kind_(kind), ordinal_(ordinal) {}
  DeviceKind kind_ = DeviceKind::cpu;
  int ordinal_ = -1;
};

std::ostream& operator<<(std::ostream& out, const Device& device);

/// What a device is. For the CPU: its model name from /proc/cpuinfo when readable, the hardware
/// threads, and the physical memory.
struct DeviceInfo {
  Device device;
  std::string name;             ///< e.g. "NVIDIA H200"
  std::size_t total_memory = 0;  ///< bytes
  int compute_major = 0;        ///< compute capability (CUDA only), e.g. 9.0
  int compute_minor = 0;
  int multiprocessors = 0;      ///< SMs (CUDA) or hardware threads (CPU)
  /// One line, e.g. "cuda:0 NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)".
  std::string describe() const;
};

/// True when this stoke was built with CUDA (STOKE_CUDA=AUTO found a toolkit, or ON).
bool built_with_cuda() noexcept;

/// CUDA devices usable now: 0 without CUDA in the build, without a driver, or without a device.
int cuda_device_count() noexcept;

/// Why no CUDA device can be used, one clause that tells the cases apart: "no GPU: no NVIDIA
/// driver is installed (...)", "no GPU: the NVIDIA driver sees no CUDA device (...)", "the NVIDIA
/// driver is too old: it supports CUDA up to 12.4, and this stoke was built with CUDA 13.0 (update
/// the driver)", "no GPU support: this stoke was built without CUDA (...)", or "CUDA cannot be
/// initialized (<error>)"; empty when cuda_device_count() > 0.
std::string cuda_unavailable_reason();

/// Facts about a device. Throws DeviceError for a CUDA device that does not exist.
DeviceInfo device_info(Device device);

/// Reads "cpu", "cuda" (= cuda:0) or "cuda:N". "auto" is not a device: see select_device().
/// Throws DeviceError naming the spec and the accepted forms.
Device parse_device(std::string_view spec);

/// The device a run should use:
/// - "auto": cuda:0 when a CUDA device is usable, else the CPU, and one line on `log` (if not null)
///   saying why: "stoke: " + cuda_unavailable_reason() + "; running on the CPU", e.g. "stoke: no
///   GPU: no NVIDIA driver is installed (libcuda.so.1 was not found); running on the CPU".
/// - "cpu": the CPU, and one line on `log` saying it was asked for.
/// - "cuda" / "cuda:N": that device; DeviceError when it does not exist, naming the devices that
///   do ("cuda:2 does not exist: this machine has 1 CUDA device (cuda:0)") or why there are none.
Device select_device(std::string_view spec = "auto", std::ostream* log = nullptr);

/// Makes a CUDA device the calling thread's current device for the guard's lifetime, restoring
/// the previous one after. Does nothing for the CPU. Not copyable or movable.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

}  // namespace stoke::gpu
