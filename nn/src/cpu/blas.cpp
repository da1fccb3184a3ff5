#include "stoke/nn/blas.hpp"

#include <cblas.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <string_view>

namespace stoke::nn {

std::string blas_kernels() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

void use_fastest_blas_kernels(char** argv) {
#if defined(__x86_64__)
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || std::getenv("STOKE_BLAS_REEXEC") != nullptr) return;
  const std::string chosen = blas_kernels();
  const bool avx2_kernels = chosen == "Haswell" || chosen == "Zen";
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (!avx2_kernels || !avx512) return;
  ::setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  ::setenv("STOKE_BLAS_REEXEC", "1", 1);
  ::execv("/proc/self/exe", argv);
  // Still here: execv failed (no /proc?). Run on with the kernels we have.
  ::unsetenv("OPENBLAS_CORETYPE");
#else
  (void)argv;
#endif
}

}  // namespace stoke::nn
