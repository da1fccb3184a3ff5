// The devices, streams, element types and errors nn computes with. They belong to
// stoke::gpu_runtime (stoke/gpu/); nn uses them under its own names, so that nn code and its users
// write nn::Device, nn::DType, nn::StreamView as they write nn::Tensor.
#pragma once

#include "stoke/gpu/device.hpp"
#include "stoke/gpu/dtype.hpp"
#include "stoke/gpu/error.hpp"
#include "stoke/gpu/memory.hpp"
#include "stoke/gpu/stream.hpp"

namespace stoke::nn {

using gpu::Device;
using gpu::DeviceGuard;
using gpu::DType;
using gpu::Stream;
using gpu::StreamView;
using gpu::TensorLayout;

using gpu::bf16_from_float;
using gpu::element_size;
using gpu::f16_from_float;
using gpu::float_from_bf16;
using gpu::float_from_f16;

using gpu::copy_async;
using gpu::DeviceBuffer;
using gpu::fill_async;

using gpu::CudaError;
using gpu::CudaOutOfMemory;
using gpu::DeviceError;
using gpu::GpuError;

}  // namespace stoke::nn
