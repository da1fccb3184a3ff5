// CudaBackend's construction (with the file of cuDNN's algorithm choices for its GPU), memory
// (empty() from the pool) and the convolutions' workspace; its kernels live in one file per family
// (cuda_backend.hpp lists them).
#include "cuda_backend.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "cuda_common.hpp"
#include "stoke/nn/device.hpp"

namespace stoke::nn {

std::unique_ptr<Backend> make_cuda_backend(Device device, StreamView stream) {
  return std::make_unique<cuda::CudaBackend>(device, stream);
}

namespace cuda {
namespace {

StreamView checked_stream(Device device, StreamView stream) {
  if (!device.is_cuda()) throw DeviceError("CudaBackend: " + device.str() + " is not a CUDA device");
  if (stream.is_host() || stream.native() == nullptr) {
    throw DeviceError("CudaBackend(" + device.str() +
                      "): needs a CUDA stream of the device (stoke never uses CUDA's legacy default stream)");
  }
  if (stream.device() != device) {
    throw DeviceError("CudaBackend(" + device.str() + "): the stream is on " + stream.device().str());
  }
  return stream;
}

std::string version_text(std::size_t version) {
  // cuDNN 9 and cuBLAS both count major * 10000 + minor * 100 + patch.
  return std::to_string(version / 10000) + "." + std::to_string(version % 10000 / 100) + "." +
         std::to_string(version % 100);
}

// What the convolution algorithms cuDNN chooses on this device depend on.
ConvAlgorithmIdentity conv_algorithm_identity(const cudaDeviceProp& properties) {
  return {
      .gpu = properties.name, .sm_major = properties.major, .sm_minor = properties.minor, .cudnn = cudnnGetVersion()};
}

}  // namespace

CudaBackend::CudaBackend(Device device, StreamView stream)
    : device_(device),
      stream_(checked_stream(device, stream)),
      cudnn_(stream_),
      cublas_(stream_),
      pool_(device),
      finite_count_(device, sizeof(unsigned)) {
  const DeviceGuard guard(device_);
  cudaDeviceProp properties{};
  STOKE_CUDA_CHECK(cudaGetDeviceProperties(&properties, device_.ordinal()));
  int cublas_version = 0;
  STOKE_CUBLAS_CHECK(cublasGetVersion(cublas_.native(), &cublas_version));
  name_ = device_.str() + " " + properties.name + " (cuDNN " + version_text(cudnnGetVersion()) + ", cuBLAS " +
          version_text(static_cast<std::size_t>(cublas_version)) + ")";
  conv_algo_file_ = open_conv_algorithm_cache(conv_algorithm_identity(properties));
}

// The pool, the workspace and the handles free themselves; cudaFree and cudnnDestroy wait for
// the device, so no queued kernel loses its memory.
CudaBackend::~CudaBackend() = default;

std::string CudaBackend::describe() const { return name_; }

Tensor CudaBackend::empty(Shape shape, DType dtype, TensorLayout layout) {
  for (const std::int64_t d : shape) {
    if (d < 0)
      throw std::invalid_argument("CudaBackend::empty: shape " + to_string(shape) + " has a negative dimension");
  }
  const std::size_t bytes = static_cast<std::size_t>(element_count(shape)) * element_size(dtype);
  return Tensor::from_owner(pool_.allocate(bytes), std::move(shape), dtype, device_, layout);
}

void* CudaBackend::workspace(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (workspace_.size() < bytes) {
    workspace_ = DeviceBuffer();  // free the old one first (cudaFree waits for its users)
    try {
      workspace_ = DeviceBuffer(device_, bytes);
    } catch (const CudaOutOfMemory&) {
      // As the pool does for tensors: give back what it caches, then try once more.
      pool_.release_cached();
      workspace_ = DeviceBuffer(device_, bytes);
    }
  }
  return workspace_.data();
}

bool CudaBackend::supports(DType dtype, TensorLayout /*layout*/) const noexcept { return is_float_type(dtype); }

// Half precision runs on the tensor cores, whose cuDNN kernels want channels-last (ResNet-50's
// convolutions and batch norm in bf16: 2.5x faster, docs/benchmarks.md); f32 keeps NCHW until
// measured otherwise.
TensorLayout CudaBackend::preferred_layout(DType dtype) const noexcept {
  return dtype == DType::bf16 || dtype == DType::f16 ? TensorLayout::nhwc : TensorLayout::nchw;
}

}  // namespace cuda
}  // namespace stoke::nn
