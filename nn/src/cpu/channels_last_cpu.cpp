// CpuBackend's channels-last support: NCHW copies of NHWC operands for the NCHW kernels, and the
// checks of the kernels that go element by element in memory order.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cpu_backend.hpp"

namespace stoke::nn {
namespace {

bool channels_last(const Tensor& t) noexcept {
  return t.defined() && t.rank() == 4 && t.layout() == TensorLayout::nhwc;
}

}  // namespace

bool CpuBackend::supports(DType dtype, TensorLayout /*layout*/) const noexcept { return dtype == DType::f32; }

void require_cpu_f32_elements(const Tensor& t, const char* what) {
  if (!t.device().is_cpu() || t.dtype() != DType::f32) {
    throw std::invalid_argument(std::string("CpuBackend: ") + what + " is " + t.describe() +
                                "; the CPU kernels take f32 tensors on the CPU");
  }
}

void require_one_layout(std::initializer_list<const Tensor*> tensors, const char* kernel) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined() || t->rank() != 4) continue;
    if (first == nullptr) {
      first = t;
    } else if (t->layout() != first->layout()) {
      throw std::invalid_argument(std::string("CpuBackend::") + kernel + ": " + first->describe() + " and " +
                                  t->describe() + " are in different layouts; convert one with to_layout first");
    }
  }
}

bool NchwCopies::needed(std::initializer_list<const Tensor*> tensors) noexcept {
  return std::any_of(tensors.begin(), tensors.end(), [](const Tensor* t) { return channels_last(*t); });
}

Tensor NchwCopies::in(const Tensor& t) {
  if (!channels_last(t)) return t;
  return to_layout(t, TensorLayout::nchw);
}

Tensor NchwCopies::out(const Tensor& t) {
  if (!channels_last(t)) return t;
  Tensor copy = to_layout(t, TensorLayout::nchw);
  outputs_.emplace_back(t, copy);
  return copy;
}

void NchwCopies::write_back() {
  for (const auto& [target, copy] : outputs_) target.copy_from(to_layout(copy, TensorLayout::nhwc));
  outputs_.clear();
}

}  // namespace stoke::nn
