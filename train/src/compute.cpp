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

std::string_view to_string(ChannelsLast choice) noexcept {
  switch (choice) {
    case ChannelsLast::automatic:
      return "auto";
    case ChannelsLast::on:
      return "on";
    case ChannelsLast::off:
      return "off";
  }
  return "unknown";
}

ChannelsLast parse_channels_last(std::string_view name) {
  for (const ChannelsLast choice : {ChannelsLast::automatic, ChannelsLast::on, ChannelsLast::off}) {
    if (name == to_string(choice)) return choice;
  }
  throw std::invalid_argument("--channels-last must be auto, on or off (got '" + std::string(name) + "')");
}

std::string layout_name(gpu::TensorLayout layout) {
  return layout == gpu::TensorLayout::nhwc ? "channels-last" : "NCHW";
}

gpu::TensorLayout compute_layout(ChannelsLast choice, const nn::Backend& backend, gpu::DType precision) {
  gpu::TensorLayout layout = backend.preferred_layout(precision);
  if (choice == ChannelsLast::on) layout = gpu::TensorLayout::nhwc;
  if (choice == ChannelsLast::off) layout = gpu::TensorLayout::nchw;
  if (!backend.supports(precision, layout)) {
    throw std::invalid_argument("--precision " + precision_name(precision) + " with --channels-last " +
                                std::string(to_string(choice)) + ": " + backend.describe() + " cannot compute in " +
                                precision_name(precision) + " " + std::string(gpu::to_string(layout)) +
                                " (mixed precision needs a CUDA device)");
  }
  return layout;
}

}  // namespace stoke::train
