#include "stoke/train/compute.hpp"

#include <stdexcept>

namespace stoke::train {

ComputeContext make_compute(const std::string& spec, std::ostream* log) {
  ComputeContext c;
  c.device = gpu::select_device(spec, log);
  if (c.device.is_cuda()) c.stream = std::make_unique<gpu::Stream>(c.device);
  c.backend = nn::make_backend(c.device, c.stream ? c.stream->view() : gpu::StreamView::host());
  return c;
}

gpu::DType compute_dtype(const std::string& precision) {
  if (precision == "fp32") return gpu::DType::f32;
  if (precision == "bf16") return gpu::DType::bf16;
  if (precision == "fp16") return gpu::DType::f16;
  throw std::invalid_argument("--precision must be fp32, bf16 or fp16 (got '" + precision + "')");
}

std::string precision_name(gpu::DType dtype) {
  switch (dtype) {
    case gpu::DType::f32:
      return "fp32";
    case gpu::DType::bf16:
      return "bf16";
    case gpu::DType::f16:
      return "fp16";
    default:
      return std::string(gpu::to_string(dtype));
  }
}

}  // namespace stoke::train
