// Where training and inference compute: a device, a stream on it and an nn backend using it, from
// a device name ("auto", "cpu", "cuda:N"); the compute precision from its name; and the memory
// layout the model computes in (`--channels-last auto|on|off`).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/dtype.hpp>
#include <stoke/gpu/stream.hpp>
#include <stoke/nn/backend.hpp>
#include <string>
#include <string_view>

namespace stoke::train {

/// Where a command computes: the device, a stream on it (CUDA only) and the backend using it.
struct ComputeContext {
  gpu::Device device = gpu::Device::cpu();
  std::unique_ptr<gpu::Stream> stream;  ///< null on the CPU; outlives the backend
  std::unique_ptr<nn::Backend> backend;
};
/// The device `spec` names ("auto", "cpu", "cuda:N"; see gpu::select_device, which logs the choice
/// to `log` when not null) and a backend on it.
ComputeContext make_compute(const std::string& spec, std::ostream* log);

/// "fp32" -> f32, "bf16" -> bf16, "fp16" -> f16; throws std::invalid_argument naming the choices.
gpu::DType compute_dtype(const std::string& precision);
/// The name compute_dtype reads: "fp32", "bf16" or "fp16" (another dtype: gpu::to_string's name).
std::string precision_name(gpu::DType dtype);

/// `--channels-last`: the memory layout a model computes in. Checkpoints are NCHW (PyTorch's
/// order) whatever the layout, so a model trained in one loads into the other.
enum class ChannelsLast : std::uint8_t {
  automatic,  ///< the backend's preferred layout for the precision (nn::Backend::preferred_layout)
  on,         ///< NHWC images and filters
  off,        ///< NCHW
};
/// "auto", "on" or "off".
std::string_view to_string(ChannelsLast choice) noexcept;
/// The inverse of to_string; throws std::invalid_argument naming the choices.
ChannelsLast parse_channels_last(std::string_view name);
/// How the commands name a layout: "channels-last" (NHWC) or "NCHW".
std::string layout_name(gpu::TensorLayout layout);
/// The layout `choice` means on `backend` for `precision`. Throws std::invalid_argument naming
/// the backend when it cannot compute `precision` in that layout.
gpu::TensorLayout compute_layout(ChannelsLast choice, const nn::Backend& backend, gpu::DType precision);

}  // namespace stoke::train
