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

#include "convert_kernel.hpp"
#include "stoke/gpu/error.hpp"

namespace stoke::gpu {

namespace {

constexpr const char* channel_names[] = {"R", "G", "B"};

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

detail::ConvertTable make_table(const ConvertOptions& options) {
  detail::ConvertTable table{};
  for (int c = 0; c < 3; ++c) {
    // The expression of nodes::Normalize, in the same order and precision: the same floats.
    for (int v = 0; v < 256; ++v) {
      table.values[c][v] = (static_cast<float>(v) / 255.0f - options.mean[c]) / options.stddev[c];
    }
  }
  return table;
}

struct AsFloat {
  float operator()(float value) const noexcept { return value; }
};
struct AsBf16 {
  std::uint16_t operator()(float value) const noexcept { return bf16_from_float(value); }
};

// The reference: one table lookup per element, written in the requested layout.
template <class Out, class Cast>
void convert_on_host(const std::uint8_t* src, Out* dst, std::size_t n, std::size_t pixels, int channels,
                     const detail::ConvertTable& table, TensorLayout layout, Cast cast) {
  const auto c_count = static_cast<std::size_t>(channels);
  for (std::size_t item = 0; item < n; ++item) {
    const std::uint8_t* in = src + item * pixels * c_count;
    Out* out = dst + item * pixels * c_count;
    if (layout == TensorLayout::nhwc) {
      for (std::size_t p = 0; p < pixels; ++p) {
        for (std::size_t c = 0; c < c_count; ++c) out[p * c_count + c] = cast(table.values[c][in[p * c_count + c]]);
      }
    } else {
      for (std::size_t c = 0; c < c_count; ++c) {
        Out* plane = out + c * pixels;
        for (std::size_t p = 0; p < pixels; ++p) plane[p] = cast(table.values[c][in[p * c_count + c]]);
      }
    }
  }
}

}  // namespace

void ConvertOptions::validate() const {
  for (int c = 0; c < 3; ++c) {
    if (!std::isfinite(mean[c])) {
      throw std::invalid_argument("ConvertOptions::mean[" + std::to_string(c) + "] (" + channel_names[c] +
                                  ") must be finite, got " + format_float(mean[c]));
    }
    if (!(std::isfinite(stddev[c]) && stddev[c] > 0)) {
      throw std::invalid_argument("ConvertOptions::stddev[" + std::to_string(c) + "] (" + channel_names[c] +
                                  ") must be finite and > 0, got " + format_float(stddev[c]));
    }
  }
  if (dtype != DType::f32 && dtype != DType::bf16) {
    throw std::invalid_argument("ConvertOptions::dtype must be f32 or bf16, got " + std::string(to_string(dtype)));
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

void convert_u8(const std::uint8_t* src, void* dst, std::size_t n, int height, int width, int channels,
                const ConvertOptions& options, StreamView stream) {
  options.validate();
  if (height <= 0 || width <= 0) {
    throw std::invalid_argument("convert_u8: height and width must be positive, got " + std::to_string(height) + "x" +
                                std::to_string(width));
  }
  if (channels < 1 || channels > 3) {
    throw std::invalid_argument("convert_u8: channels must be 1, 2 or 3 (mean and stddev are per R, G, B), got " +
                                std::to_string(channels));
  }
  // Also rejects sizes whose byte count overflows, before anything is read or written.
  (void)converted_bytes(n, height, width, channels, options.dtype);
  if (n == 0) return;
  if (src == nullptr || dst == nullptr) {
    throw std::invalid_argument(std::string("convert_u8: ") + (src == nullptr ? "src" : "dst") +
                                " is null with n = " + std::to_string(n) + " images");
  }
  if (reinterpret_cast<std::uintptr_t>(dst) % element_size(options.dtype) != 0) {
    throw std::invalid_argument("convert_u8: dst must be aligned to its element type (" +
                                std::to_string(element_size(options.dtype)) + " bytes for " +
                                std::string(to_string(options.dtype)) + ")");
  }

  if (stream.is_host()) {
    const detail::ConvertTable table = make_table(options);
    const std::size_t pixels = static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
    const std::size_t item_bytes = pixels * static_cast<std::size_t>(channels);
    const std::size_t out_item = item_bytes * element_size(options.dtype);
    // Items in parallel (a batch of 64 at 32 px is 200k lookups): on the CPU device this runs in
    // the compute stage, which the pipeline waits for. Isolated, so that this thread runs none of
    // the pipeline's other tasks meanwhile; the results do not depend on the split.
    tbb::this_task_arena::isolate([&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, std::max<std::size_t>(1, 16384 / item_bytes)),
                        [&](const tbb::blocked_range<std::size_t>& items) {
                          const std::uint8_t* in = src + items.begin() * item_bytes;
                          void* out = static_cast<std::byte*>(dst) + items.begin() * out_item;
                          if (options.dtype == DType::f32) {
                            convert_on_host(in, static_cast<float*>(out), items.size(), pixels, channels, table,
                                            options.layout, AsFloat{});
                          } else {
                            convert_on_host(in, static_cast<std::uint16_t*>(out), items.size(), pixels, channels,
                                            table, options.layout, AsBf16{});
                          }
                        });
    });
    return;
  }
#if STOKE_HAS_CUDA
  // The kernel looks values up in the same table, passed by value with the launch.
  detail::launch_convert_u8(src, dst, n, height, width, channels, make_table(options), options.dtype, options.layout,
                            stream);
#else
  throw DeviceError("convert_u8 on " + stream.device().str() +
                    ": this stoke was built without CUDA; convert on the host stream (StreamView::host()) or "
                    "rebuild with -DSTOKE_CUDA=ON");
#endif
}

}  // namespace stoke::gpu
