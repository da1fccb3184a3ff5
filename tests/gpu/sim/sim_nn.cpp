// stoke_nn_sim's stand-in for nn's CUDA backend: the backend calls the real cuDNN and cuBLAS,
// which the simulator does not model, so its sources are left out and make_backend(cuda) says so.
#include <memory>

#include "cuda/cuda_backend.hpp"
#include "stoke/gpu/error.hpp"

namespace stoke::nn {

std::unique_ptr<Backend> make_cuda_backend(Device device, StreamView /*stream*/) {
  throw gpu::DeviceError("make_backend(" + device.str() + "): the simulated CUDA runtime has no nn backend");
}

}  // namespace stoke::nn
