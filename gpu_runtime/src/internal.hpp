// Private helpers of stoke::gpu shared by its sources in both builds (not installed).
#pragma once

#include <cstddef>
#include <string>

#include "stoke/gpu/device.hpp"

namespace stoke::gpu::detail {

/// Counts a host wait on the GPU if the calling thread is a oneTBB worker (host_waits.cpp).
void note_host_wait() noexcept;

/// A size for messages, in the largest binary unit that keeps it >= 1: "512 B", "1.5 GiB".
std::string format_bytes(std::size_t bytes);

/// Writes one line to stderr for a failed call in code that must not throw (a destructor):
/// "stoke: warning: <file>:<line>: <call> failed: <code_name> (<text>); ignored during cleanup".
void report_failure(const char* code_name, const char* text, const char* call, const char* file, int line) noexcept;

/// Throws DeviceError unless `device` is a CUDA device: "<what> needs a CUDA device, not the CPU".
void require_cuda_device(Device device, const char* what);

/// The DeviceError message for a CUDA ordinal that is out of range or unusable, naming the devices
/// that exist or why there are none: "cuda:2 does not exist: this machine has 1 CUDA device (cuda:0)".
std::string missing_device_message(Device device);

}  // namespace stoke::gpu::detail
