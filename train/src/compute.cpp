#include "stoke/train/compute.hpp"

#include <stdexcept>
#include <stoke/base/enum_names.hpp>

namespace stoke::train {

ComputeContext make_compute(const std::string& spec, std::ostream* log) {
  ComputeContext c;
  c.device = gpu::select_device(spec, log);
  if (c.device.is_cuda()) c.stream = std::make_unique<gpu::Stream>(c.device);
  c.backend = nn::make_backend(c.device, c.stream ? c.stream->view() : gpu::StreamView::host());
  return c;
}

namespace {

constexpr base::EnumNames<gpu::DType, 3> precision_names{
    {{{gpu::DType::f32, "fp32"}, {gpu::DType::bf16, "bf16"}, {gpu::DType::f16, "fp16"}}}};
constexpr base::EnumNames<ChannelsLast, 3> channels_last_names{
    {{{ChannelsLast::automatic, "auto"}, {ChannelsLast::on, "on"}, {ChannelsLast::off, "off"}}}};

}  // namespace

gpu::DType compute_dtype(const std::string& precision) {
  if (const auto dtype = precision_names.find(precision)) return *dtype;
  throw std::invalid_argument("--precision must be " + precision_names.choices() + " (got '" + precision + "')");
}

std::string precision_name(gpu::DType dtype) { return std::string(precision_names.name(dtype, gpu::to_string(dtype))); }

std::string_view to_string(ChannelsLast choice) noexcept { return channels_last_names.name(choice); }

ChannelsLast parse_channels_last(std::string_view name) {
  if (const auto choice = channels_last_names.find(name)) return *choice;
  throw std::invalid_argument("--channels-last must be " + channels_last_names.choices() + " (got '" +
                              std::string(name) + "')");
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
