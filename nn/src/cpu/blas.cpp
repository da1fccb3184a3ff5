#include "stoke/nn/blas.hpp"

#include <cblas.h>
#include <unistd.h>

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>

namespace stoke::nn {

std::string blas_kernels() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

VectorUnits cpu_vector_units() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (avx2 && avx512) return VectorUnits::avx512;
  if (avx2) return VectorUnits::avx2;
#endif
  return VectorUnits::older;
}

std::string better_blas_kernels(std::string_view chosen, VectorUnits units) {
  const auto one_of = [&](std::initializer_list<std::string_view> names) {
    for (const std::string_view name : names) {
      if (chosen == name) return true;
    }
    return false;
  };
  const bool avx512_kernels = one_of({"SkylakeX", "Cooperlake", "SapphireRapids"});
  const bool avx2_kernels = avx512_kernels || one_of({"Haswell", "Zen", "Excavator"});
  if (units == VectorUnits::avx512 && !avx512_kernels) return "SkylakeX";
  if (units == VectorUnits::avx2 && !avx2_kernels) return "Haswell";
  return "";
}

void use_fastest_blas_kernels(char** argv) {
#if defined(__x86_64__)
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || std::getenv("STOKE_BLAS_REEXEC") != nullptr) return;
  const std::string better = better_blas_kernels(blas_kernels(), cpu_vector_units());
  if (better.empty()) return;
  ::setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
  ::setenv("STOKE_BLAS_REEXEC", "1", 1);
  ::execv("/proc/self/exe", argv);
  // Still here: execv failed (no /proc?). Run on with the kernels we have.
  ::unsetenv("OPENBLAS_CORETYPE");
#else
  (void)argv;
#endif
}

}  // namespace stoke::nn
