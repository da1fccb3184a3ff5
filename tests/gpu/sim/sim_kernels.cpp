// The simulator's versions of stoke's kernel launchers (gpu_runtime/src/cuda/*.cu and
// gpu/src/cuda/*.cu), which stoke_gpu_sim links instead of the CUDA ones: each validates like the
// real launcher, then enqueues on the stream what the kernel computes, as a CPU function that runs
// when the stream gets there.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>

#include "convert_kernel.hpp"
#include "cuda/cuda_internal.hpp"
#include "fake_cudart.hpp"
#include "stoke/gpu/dtype.hpp"
#include "stoke/gpu/error.hpp"
#include "stoke/gpu/synthetic.hpp"

namespace stoke::gpu::detail {

namespace {

// What the convert kernels compute, element by element: out = cast(table[c][in]) in `layout`.
template <class Out, class Cast>
void convert(const std::uint8_t* src, Out* dst, std::size_t n, std::size_t pixels, std::size_t channels,
             const ConvertTable& table, TensorLayout layout, Cast cast) {
  for (std::size_t item = 0; item < n; ++item) {
    const std::uint8_t* in = src + item * pixels * channels;
    Out* out = dst + item * pixels * channels;
    for (std::size_t p = 0; p < pixels; ++p) {
      for (std::size_t c = 0; c < channels; ++c) {
        const std::size_t at = layout == TensorLayout::nhwc ? p * channels + c : c * pixels + p;
        out[at] = cast(table.values[c][in[p * channels + c]]);
      }
    }
  }
}

// What the element-wise convert kernel computes: out = cast((in / range - mean[c]) / stddev[c]).
template <class In, class Out, class Cast>
void convert_any(const In* src, Out* dst, std::size_t n, std::size_t pixels, std::size_t channels,
                 const ConvertParams& params, TensorLayout layout, Cast cast) {
  for (std::size_t item = 0; item < n; ++item) {
    const In* in = src + item * pixels * channels;
    Out* out = dst + item * pixels * channels;
    for (std::size_t p = 0; p < pixels; ++p) {
      for (std::size_t c = 0; c < channels; ++c) {
        const std::size_t at = layout == TensorLayout::nhwc ? p * channels + c : c * pixels + p;
        const float value = static_cast<float>(in[p * channels + c]);
        out[at] = cast((value / params.range - params.mean[c]) / params.stddev[c]);
      }
    }
  }
}

template <class Out, class Cast>
void convert_by_input(const void* src, DType src_dtype, Out* dst, std::size_t n, std::size_t pixels,
                      std::size_t channels, const ConvertParams& params, TensorLayout layout, Cast cast) {
  switch (src_dtype) {
    case DType::u8:
      return convert_any(static_cast<const std::uint8_t*>(src), dst, n, pixels, channels, params, layout, cast);
    case DType::u16:
      return convert_any(static_cast<const std::uint16_t*>(src), dst, n, pixels, channels, params, layout, cast);
    case DType::i16:
      return convert_any(static_cast<const std::int16_t*>(src), dst, n, pixels, channels, params, layout, cast);
    default:
      return convert_any(static_cast<const float*>(src), dst, n, pixels, channels, params, layout, cast);
  }
}

}  // namespace

void launch_convert(const void* src, DType src_dtype, void* dst, std::size_t n, int height, int width, int channels,
                    const ConvertParams& params, DType dtype, TensorLayout layout, StreamView stream) {
  const cudaStream_t native = native_stream(stream, "convert");
  const DeviceGuard guard(stream.device());
  const std::size_t elements =
      n * static_cast<std::size_t>(height) * static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  STOKE_CUDA_CHECK(sim::check_kernel_access(src, elements * element_size(src_dtype), "convert (src)"));
  STOKE_CUDA_CHECK(sim::check_kernel_access(dst, elements * element_size(dtype), "convert (dst)"));
  const std::size_t pixels = static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
  const auto c_count = static_cast<std::size_t>(channels);
  STOKE_CUDA_CHECK(sim::enqueue(native, [=] {
    if (dtype == DType::bf16) {
      convert_by_input(src, src_dtype, static_cast<std::uint16_t*>(dst), n, pixels, c_count, params, layout,
                       [](float value) { return bf16_from_float(value); });
    } else if (dtype == DType::f16) {
      convert_by_input(src, src_dtype, static_cast<std::uint16_t*>(dst), n, pixels, c_count, params, layout,
                       [](float value) { return f16_from_float(value); });
    } else {
      convert_by_input(src, src_dtype, static_cast<float*>(dst), n, pixels, c_count, params, layout,
                       [](float value) { return value; });
    }
  }));
}

void launch_convert_u8(const std::uint8_t* src, void* dst, std::size_t n, int height, int width, int channels,
                       const ConvertTable& table, DType dtype, TensorLayout layout, StreamView stream) {
  const cudaStream_t native = native_stream(stream, "convert_u8");
  const DeviceGuard guard(stream.device());
  const std::size_t pixels = static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
  const auto c_count = static_cast<std::size_t>(channels);
  // A kernel given host memory, or a buffer too small, would fault on the GPU.
  STOKE_CUDA_CHECK(sim::check_kernel_access(src, n * pixels * c_count, "convert_u8 (src)"));
  STOKE_CUDA_CHECK(sim::check_kernel_access(dst, n * pixels * c_count * element_size(dtype), "convert_u8 (dst)"));
  // The table travels by value, as the kernel's parameter does.
  STOKE_CUDA_CHECK(sim::enqueue(native, [=] {
    if (dtype == DType::bf16) {
      convert(src, static_cast<std::uint16_t*>(dst), n, pixels, c_count, table, layout,
              [](float value) { return bf16_from_float(value); });
    } else if (dtype == DType::f16) {
      convert(src, static_cast<std::uint16_t*>(dst), n, pixels, c_count, table, layout,
              [](float value) { return f16_from_float(value); });
    } else {
      convert(src, static_cast<float*>(dst), n, pixels, c_count, table, layout, [](float value) { return value; });
    }
  }));
}

void launch_synthetic_work(StreamView stream, std::chrono::nanoseconds duration) {
  const cudaStream_t native = native_stream(stream, "synthetic_work");
  // The stream is busy for `duration` from when it gets there; sleeping, not spinning, leaves the
  // few cores of a CI machine to the rest of the pipeline.
  STOKE_CUDA_CHECK(sim::enqueue(native, [duration] {
    const auto end = std::chrono::steady_clock::now() + duration;
    std::this_thread::sleep_until(end);
  }));
}

}  // namespace stoke::gpu::detail
