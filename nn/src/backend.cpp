#include "stoke/nn/backend.hpp"

#include <utility>

#include "cpu/cpu_backend.hpp"
#if STOKE_HAS_CUDA
#include "cuda/cuda_backend.hpp"
#endif
#include "stoke/nn/device.hpp"

namespace stoke::nn {

Tensor Backend::zeros(Shape shape, DType dtype, TensorLayout layout) {
  Tensor t = empty(std::move(shape), dtype, layout);
  t.zero(stream());
  return t;
}

bool Backend::supports(DType dtype, TensorLayout layout) const noexcept {
  return dtype == DType::f32 && layout == TensorLayout::nchw;
}

TensorLayout Backend::preferred_layout(DType /*dtype*/) const noexcept { return TensorLayout::nchw; }

bool Backend::all_finite_in(std::span<const Tensor> xs) {
  for (const Tensor& x : xs) {
    if (!all_finite(x)) return false;
  }
  return true;
}

std::unique_ptr<Backend> make_backend(Device device, StreamView stream) {
  if (device.is_cpu()) return std::make_unique<CpuBackend>();
  if (stream.device() != device) {
    throw DeviceError("make_backend: the stream is on " + stream.device().str() + ", not on " + device.str());
  }
#if STOKE_HAS_CUDA
  return make_cuda_backend(device, stream);
#else
  throw DeviceError("make_backend(" + device.str() +
                    "): this build of stoke has no CUDA (configure with -DSTOKE_CUDA=ON); use Device::cpu()");
#endif
}

}  // namespace stoke::nn
