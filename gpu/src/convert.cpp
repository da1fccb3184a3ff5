#include "stoke/gpu/convert.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "convert_kernel.hpp"
#include "stoke/gpu/error.hpp"

namespace stoke::gpu {

namespace {

std::string format_float(float value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

std::size_t checked_multiply(std::size_t a, std::size_t b) {
  if (b != 0 && a > std::numeric_limits<std::size_t>::max() / b) {
    throw std::overflow_error("converted_bytes: the tensor's size in bytes does not fit in std::size_t");
  }
  return a * b;
}

float full_scale(DType dtype) {
  switch (dtype) {
    case DType::u8:
      return 255.0f;
    case DType::u16:
      return 65535.0f;
    case DType::i16:
      return 32767.0f;
    default:
      return 1.0f;
  }
}

// The constants for `channels` channels: a one-value list stands for every channel.
detail::ConvertParams make_params(const ConvertOptions& options, DType src_dtype, int channels) {
  detail::ConvertParams params{};
  for (int c = 0; c < channels; ++c) {
    const auto i = static_cast<std::size_t>(c);
    params.mean[c] = options.mean.size() == 1 ? options.mean[0] : options.mean[i];
    params.stddev[c] = options.stddev.size() == 1 ? options.stddev[0] : options.stddev[i];
  }
  params.range = options.range > 0 ? options.range : full_scale(src_dtype);
  return params;
}

// The one expression every path computes, in float.
inline float normalized(float value, float range, float mean, float stddev) { return (value / range - mean) / stddev; }

struct AsFloat {
  float operator()(float value) const noexcept { return value; }
};
struct AsBf16 {
  std::uint16_t operator()(float value) const noexcept { return bf16_from_float(value); }
};
struct AsF16 {
  std::uint16_t operator()(float value) const noexcept { return f16_from_float(value); }
};

// uint8: one table lookup per element (256 entries per channel), written in the requested layout.
template <class Out, class Cast>
void convert_u8_on_host(const std::uint8_t* in, Out* out, std::size_t n, std::size_t pixels, std::size_t channels,
                        const std::vector<float>& table, TensorLayout layout, Cast cast) {
  for (std::size_t item = 0; item < n; ++item, in += pixels * channels, out += pixels * channels) {
    if (layout == TensorLayout::nhwc) {
      for (std::size_t p = 0; p < pixels; ++p) {
        for (std::size_t c = 0; c < channels; ++c) out[p * channels + c] = cast(table[c * 256 + in[p * channels + c]]);
      }
    } else {
      for (std::size_t c = 0; c < channels; ++c) {
        const float* lookup = table.data() + c * 256;
        Out* plane = out + c * pixels;
        for (std::size_t p = 0; p < pixels; ++p) plane[p] = cast(lookup[in[p * channels + c]]);
      }
    }
  }
}

// Other inputs: the expression per element, a channel (plane, or stride of the NHWC row) at a time
// so that the loop body has no data-dependent branch and the compiler vectorizes it.
template <class In, class Out, class Cast>
void convert_on_host(const In* in, Out* out, std::size_t n, std::size_t pixels, std::size_t channels,
                     const detail::ConvertParams& params, TensorLayout layout, Cast cast) {
  const float range = params.range;
  for (std::size_t item = 0; item < n; ++item, in += pixels * channels, out += pixels * channels) {
    for (std::size_t c = 0; c < channels; ++c) {
      const float mean = params.mean[c];
      const float stddev = params.stddev[c];
      const std::size_t out_stride = layout == TensorLayout::nhwc ? channels : 1;
      Out* to = layout == TensorLayout::nhwc ? out + c : out + c * pixels;
      for (std::size_t p = 0; p < pixels; ++p) {
        to[p * out_stride] = cast(normalized(static_cast<float>(in[p * channels + c]), range, mean, stddev));
      }
    }
  }
}

template <class Out, class Cast>
void convert_range_on_host(const void* src, DType src_dtype, Out* dst, std::size_t n, std::size_t pixels,
                           std::size_t channels, const detail::ConvertParams& params, const std::vector<float>& table,
                           TensorLayout layout, Cast cast) {
  switch (src_dtype) {
    case DType::u8:
      convert_u8_on_host(static_cast<const std::uint8_t*>(src), dst, n, pixels, channels, table, layout, cast);
      break;
    case DType::u16:
      convert_on_host(static_cast<const std::uint16_t*>(src), dst, n, pixels, channels, params, layout, cast);
      break;
    case DType::i16:
      convert_on_host(static_cast<const std::int16_t*>(src), dst, n, pixels, channels, params, layout, cast);
      break;
    default:
      convert_on_host(static_cast<const float*>(src), dst, n, pixels, channels, params, layout, cast);
      break;
  }
}

void check_list(const std::vector<float>& values, const char* field, bool positive) {
  if (values.empty() || values.size() > static_cast<std::size_t>(max_convert_channels)) {
    throw std::invalid_argument(std::string("ConvertOptions::") + field + " must hold 1 to " +
                                std::to_string(max_convert_channels) + " values (one per channel, or one for all), got " +
                                std::to_string(values.size()));
  }
  for (std::size_t c = 0; c < values.size(); ++c) {
    const float v = values[c];
    if (!std::isfinite(v) || (positive && !(v > 0))) {
      throw std::invalid_argument(std::string("ConvertOptions::") + field + "[" + std::to_string(c) + "] must be finite" +
                                  (positive ? " and > 0" : "") + ", got " + format_float(v));
    }
  }
}

void check_aligned(const void* pointer, DType dtype, const char* name) {
  if (reinterpret_cast<std::uintptr_t>(pointer) % element_size(dtype) != 0) {
    throw std::invalid_argument(std::string("convert: ") + name + " must be aligned to its element type (" +
                                std::to_string(element_size(dtype)) + " bytes for " + std::string(to_string(dtype)) +
                                ")");
  }
}

}  // namespace

void ConvertOptions::validate() const {
  check_list(mean, "mean", false);
  check_list(stddev, "stddev", true);
  if (!std::isfinite(range) || range < 0) {
    throw std::invalid_argument("ConvertOptions::range must be finite and >= 0 (0: the input type's full scale), got " +
                                format_float(range));
  }
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16) {
    throw std::invalid_argument("ConvertOptions::dtype must be f32, bf16 or f16, got " + std::string(to_string(dtype)));
  }
}

void ConvertOptions::validate_for(int channels) const {
  validate();
  for (const auto* list : {&mean, &stddev}) {
    if (list->size() != 1 && list->size() < static_cast<std::size_t>(channels)) {
      throw std::invalid_argument(std::string("ConvertOptions::") + (list == &mean ? "mean" : "stddev") + " has " +
                                  std::to_string(list->size()) + " values for images of " + std::to_string(channels) +
                                  " channels: give one per channel, or a single one for all");
    }
  }
}

std::size_t converted_bytes(std::size_t n, int height, int width, int channels, DType dtype) {
  if (height < 0 || width < 0 || channels < 0) {
    throw std::invalid_argument("converted_bytes: height, width and channels must not be negative, got " +
                                std::to_string(height) + "x" + std::to_string(width) + "x" + std::to_string(channels));
  }
  std::size_t bytes = checked_multiply(n, static_cast<std::size_t>(height));
  bytes = checked_multiply(bytes, static_cast<std::size_t>(width));
  bytes = checked_multiply(bytes, static_cast<std::size_t>(channels));
  return checked_multiply(bytes, element_size(dtype));
}

void convert(const void* src, DType src_dtype, void* dst, std::size_t n, int height, int width, int channels,
             const ConvertOptions& options, StreamView stream) {
  if (!convertible(src_dtype)) {
    throw std::invalid_argument("convert: the input must be u8, u16, i16 or f32 pixels, got " +
                                std::string(to_string(src_dtype)));
  }
  if (height <= 0 || width <= 0) {
    throw std::invalid_argument("convert: height and width must be positive, got " + std::to_string(height) + "x" +
                                std::to_string(width));
  }
  if (channels < 1 || channels > max_convert_channels) {
    throw std::invalid_argument("convert: channels must be 1 to " + std::to_string(max_convert_channels) + ", got " +
                                std::to_string(channels));
  }
  options.validate_for(channels);
  // Also rejects sizes whose byte count overflows, before anything is read or written.
  (void)converted_bytes(n, height, width, channels, src_dtype);
  (void)converted_bytes(n, height, width, channels, options.dtype);
  if (n == 0) return;
  if (src == nullptr || dst == nullptr) {
    throw std::invalid_argument(std::string("convert: ") + (src == nullptr ? "src" : "dst") + " is null with n = " +
                                std::to_string(n) + " images");
  }
  check_aligned(src, src_dtype, "src");
  check_aligned(dst, options.dtype, "dst");

  const detail::ConvertParams params = make_params(options, src_dtype, channels);
  const auto table_for = [&](int table_channels) {
    // The expression of nodes::Normalize, in the same order and precision: the same floats.
    std::vector<float> table(static_cast<std::size_t>(table_channels) * 256);
    for (int c = 0; c < table_channels; ++c) {
      for (int v = 0; v < 256; ++v) {
        table[static_cast<std::size_t>(c * 256 + v)] =
            normalized(static_cast<float>(v), params.range, params.mean[c], params.stddev[c]);
      }
    }
    return table;
  };

  if (stream.is_host()) {
    const std::vector<float> table = src_dtype == DType::u8 ? table_for(channels) : std::vector<float>{};
    const std::size_t pixels = static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
    const std::size_t item_elements = pixels * static_cast<std::size_t>(channels);
    const std::size_t in_item = item_elements * element_size(src_dtype);
    const std::size_t out_item = item_elements * element_size(options.dtype);
    // Items in parallel (a batch of 64 at 32 px is 200k elements): on the CPU device this runs in
    // the compute stage, which the pipeline waits for. Isolated, so that this thread runs none of
    // the pipeline's other tasks meanwhile; the results do not depend on the split.
    tbb::this_task_arena::isolate([&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, std::max<std::size_t>(1, 16384 / item_elements)),
                        [&](const tbb::blocked_range<std::size_t>& items) {
                          const void* in = static_cast<const std::byte*>(src) + items.begin() * in_item;
                          void* out = static_cast<std::byte*>(dst) + items.begin() * out_item;
                          const auto c_count = static_cast<std::size_t>(channels);
                          if (options.dtype == DType::f32) {
                            convert_range_on_host(in, src_dtype, static_cast<float*>(out), items.size(), pixels,
                                                  c_count, params, table, options.layout, AsFloat{});
                          } else if (options.dtype == DType::bf16) {
                            convert_range_on_host(in, src_dtype, static_cast<std::uint16_t*>(out), items.size(), pixels,
                                                  c_count, params, table, options.layout, AsBf16{});
                          } else {
                            convert_range_on_host(in, src_dtype, static_cast<std::uint16_t*>(out), items.size(), pixels,
                                                  c_count, params, table, options.layout, AsF16{});
                          }
                        });
    });
    return;
  }
#if STOKE_HAS_CUDA
  if (src_dtype == DType::u8 && channels <= 3) {
    // The kernel looks values up in the same table, passed by value with the launch.
    detail::ConvertTable table{};
    const std::vector<float> values = table_for(channels);
    std::copy(values.begin(), values.end(), &table.values[0][0]);
    detail::launch_convert_u8(static_cast<const std::uint8_t*>(src), dst, n, height, width, channels, table,
                              options.dtype, options.layout, stream);
  } else {
    detail::launch_convert(src, src_dtype, dst, n, height, width, channels, params, options.dtype, options.layout,
                           stream);
  }
#else
  throw DeviceError("convert on " + stream.device().str() +
                    ": this stoke was built without CUDA; convert on the host stream (StreamView::host()) or "
                    "rebuild with -DSTOKE_CUDA=ON");
#endif
}

}  // namespace stoke::gpu
