// CpuBackend's elementwise kernels: relu, add, dropout, cast, all_finite, scale. Each is one pass
// over memory, split into chunks of 64K elements across oneTBB's workers (smaller tensors run on
// the calling thread: a task costs more than the work it would carry).
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "../dropout_mask.hpp"
#include "cpu_backend.hpp"
#include "stoke/nn/device.hpp"

namespace stoke::nn {
namespace {

void require_same_count(const Tensor& a, const Tensor& b, const char* kernel) {
  if (a.numel() != b.numel()) {
    throw std::invalid_argument(std::string("CpuBackend::") + kernel + ": " + a.describe() + " and " + b.describe() +
                                " differ in element count");
  }
}

void require_cpu(const Tensor& t, const char* kernel) {
  if (!t.device().is_cpu()) {
    throw std::invalid_argument(std::string("CpuBackend::") + kernel + ": " + t.describe() + " is not on the CPU");
  }
}

void require_probability(float p, const char* kernel) {
  if (!(p >= 0 && p < 1)) {
    throw std::invalid_argument(std::string("CpuBackend::") + kernel + ": p = " + std::to_string(p) +
                                " is outside [0, 1)");
  }
}

void require_mask(const Tensor& mask, const Tensor& like, const char* kernel) {
  if (!mask.device().is_cpu() || mask.dtype() != DType::u8) {
    throw std::invalid_argument(std::string("CpuBackend::") + kernel + ": the mask " + mask.describe() +
                                " is not a u8 tensor on the CPU");
  }
  require_same_count(mask, like, kernel);
}

// A float's bits with an all-ones exponent are an infinity or a NaN. Testing bits rather than
// std::isfinite keeps the check right even under -ffast-math.
bool finite_f32(float v) { return (std::bit_cast<std::uint32_t>(v) & 0x7f800000u) != 0x7f800000u; }
bool finite_bf16(std::uint16_t bits) { return (bits & 0x7f80u) != 0x7f80u; }
bool finite_f16(std::uint16_t bits) { return (bits & 0x7c00u) != 0x7c00u; }

bool is_float_type(DType dtype) { return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16; }

float load(const void* data, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::bf16:
      return float_from_bf16(static_cast<const std::uint16_t*>(data)[i]);
    case DType::f16:
      return float_from_f16(static_cast<const std::uint16_t*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

void store(void* data, DType dtype, std::int64_t i, float v) {
  switch (dtype) {
    case DType::bf16:
      static_cast<std::uint16_t*>(data)[i] = bf16_from_float(v);
      break;
    case DType::f16:
      static_cast<std::uint16_t*>(data)[i] = f16_from_float(v);
      break;
    default:
      static_cast<float*>(data)[i] = v;
      break;
  }
}

}  // namespace

void CpuBackend::relu_forward(const Tensor& x, const Tensor& y) {
  require_cpu_f32_elements(x, "relu_forward's x");
  require_cpu_f32_elements(y, "relu_forward's y");
  require_same_count(x, y, "relu_forward");
  require_one_layout({&x, &y}, "relu_forward");
  const float* in = x.data_as<const float>();
  float* out = y.data_as<float>();
  // v < 0 ? 0 : v rather than max(v, 0): a NaN goes through, as in PyTorch, so all_finite sees it.
  for_chunks(x.numel(), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) out[i] = in[i] < 0.0f ? 0.0f : in[i];
  });
}

void CpuBackend::relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  require_cpu_f32_elements(y, "relu_backward's y");
  require_cpu_f32_elements(dy, "relu_backward's dy");
  require_cpu_f32_elements(dx, "relu_backward's dx");
  require_same_count(y, dy, "relu_backward");
  require_same_count(dy, dx, "relu_backward");
  require_one_layout({&y, &dy, &dx}, "relu_backward");
  const float* out = y.data_as<const float>();
  const float* grad_out = dy.data_as<const float>();
  float* grad_in = dx.data_as<float>();
  // Both operands are loaded before the select: `out[i] > 0 ? grad_out[i] : 0` reads grad_out
  // only on one side, which the compiler may not vectorise without masked loads, and a branch on
  // the sign of activations mispredicts about half the time.
  for_chunks(y.numel(), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float g = grad_out[i];
      grad_in[i] = out[i] > 0.0f ? g : 0.0f;
    }
  });
}

void CpuBackend::add(const Tensor& a, const Tensor& b, const Tensor& y) {
  require_cpu_f32_elements(a, "add's a");
  require_cpu_f32_elements(b, "add's b");
  require_cpu_f32_elements(y, "add's y");
  require_same_count(a, b, "add");
  require_same_count(a, y, "add");
  require_one_layout({&a, &b, &y}, "add");
  const float* lhs = a.data_as<const float>();
  const float* rhs = b.data_as<const float>();
  float* out = y.data_as<float>();
  for_chunks(a.numel(), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) out[i] = lhs[i] + rhs[i];
  });
}

void CpuBackend::dropout_forward(const Tensor& x, float p, std::uint64_t seed, const Tensor& mask, const Tensor& y) {
  require_cpu_f32_elements(x, "dropout_forward's x");
  require_cpu_f32_elements(y, "dropout_forward's y");
  require_same_count(x, y, "dropout_forward");
  require_mask(mask, x, "dropout_forward");
  require_probability(p, "dropout_forward");
  const std::uint64_t threshold = dropout::threshold(p);
  const float keep_scale = 1.0f / (1.0f - p);
  const float* in = x.data_as<const float>();
  float* out = y.data_as<float>();
  std::uint8_t* kept = mask.data_as<std::uint8_t>();
  for_chunks(x.numel(), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const bool keep = dropout::keeps(seed, static_cast<std::uint64_t>(i), threshold);
      kept[i] = keep ? 1 : 0;
      out[i] = keep ? in[i] * keep_scale : 0.0f;
    }
  });
}

void CpuBackend::dropout_backward(const Tensor& dy, const Tensor& mask, float p, const Tensor& dx) {
  require_cpu_f32_elements(dy, "dropout_backward's dy");
  require_cpu_f32_elements(dx, "dropout_backward's dx");
  require_same_count(dy, dx, "dropout_backward");
  require_mask(mask, dy, "dropout_backward");
  require_probability(p, "dropout_backward");
  const float keep_scale = 1.0f / (1.0f - p);
  const float* grad_out = dy.data_as<const float>();
  const std::uint8_t* kept = mask.data_as<const std::uint8_t>();
  float* grad_in = dx.data_as<float>();
  for_chunks(dy.numel(), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float g = grad_out[i] * keep_scale;  // loaded unconditionally, as in relu_backward
      grad_in[i] = kept[i] != 0 ? g : 0.0f;
    }
  });
}

void CpuBackend::cast(const Tensor& src, const Tensor& dst) {
  require_cpu(src, "cast");
  require_cpu(dst, "cast");
  if (!is_float_type(src.dtype()) || !is_float_type(dst.dtype())) {
    throw std::invalid_argument("CpuBackend::cast: " + src.describe() + " to " + dst.describe() +
                                "; cast converts between f32, bf16 and f16");
  }
  require_same_count(src, dst, "cast");
  // Elements are converted in memory order, which means the same thing only in the same layout.
  if (src.rank() == 4 && dst.rank() == 4 && src.layout() != dst.layout()) {
    throw std::invalid_argument("CpuBackend::cast: " + src.describe() + " to " + dst.describe() +
                                " changes the layout; convert the layout with to_layout first");
  }
  if (src.dtype() == dst.dtype()) {
    if (src.data() != dst.data()) std::memcpy(dst.data(), src.data(), src.bytes());
    return;
  }
  // bf16 <-> f16 goes through float, which holds both exactly, so it rounds only once.
  const DType from = src.dtype();
  const DType to = dst.dtype();
  const void* in = src.data();
  void* out = dst.data();
  for_chunks(src.numel(), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) store(out, to, i, load(in, from, i));
  });
}

bool CpuBackend::all_finite(const Tensor& x) {
  require_cpu(x, "all_finite");
  const std::int64_t n = x.numel();
  const DType dtype = x.dtype();
  if (!is_float_type(dtype)) {
    throw std::invalid_argument("CpuBackend::all_finite: " + x.describe() + " is not f32, bf16 or f16");
  }
  const auto chunk_finite = [&](std::int64_t begin, std::int64_t end) {
    if (dtype == DType::f32) {
      const float* v = x.data_as<const float>();
      for (std::int64_t i = begin; i < end; ++i) {
        if (!finite_f32(v[i])) return false;
      }
      return true;
    }
    const std::uint16_t* bits = x.data_as<const std::uint16_t>();
    const auto finite = dtype == DType::bf16 ? finite_bf16 : finite_f16;
    for (std::int64_t i = begin; i < end; ++i) {
      if (!finite(bits[i])) return false;
    }
    return true;
  };
  if (n <= kGrain) return chunk_finite(0, n);
  return isolated_parallel_reduce(
      tbb::blocked_range<std::int64_t>(0, n, kGrain), true,
      [&](const tbb::blocked_range<std::int64_t>& range, bool finite) {
        return finite && chunk_finite(range.begin(), range.end());
      },
      [](bool a, bool b) { return a && b; });
}

void CpuBackend::scale(const Tensor& x, float alpha) {
  require_cpu_f32_elements(x, "scale's x");
  float* v = x.data_as<float>();
  for_chunks(x.numel(), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) v[i] *= alpha;
  });
}

}  // namespace stoke::nn
