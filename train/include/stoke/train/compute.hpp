// Where training and inference compute: a device, a stream on it and an nn backend using it, from
// a device name ("auto", "cpu", "cuda:N"); and the compute precision from its name.
#pragma once

#include <iosfwd>
#include <memory>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/dtype.hpp>
#include <stoke/gpu/stream.hpp>
#include <stoke/nn/backend.hpp>
#include <string>

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

}  // namespace stoke::train
