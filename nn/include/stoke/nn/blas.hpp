// The BLAS under nn's CPU backend (OpenBLAS), and making sure it runs its fastest kernels.
//
//   int main(int argc, char** argv) {
//     stoke::nn::use_fastest_blas_kernels(argv);   // first thing: may re-execute the program
//
// OpenBLAS picks its kernels for the CPU when it is loaded. Debian 12's OpenBLAS (0.3.21) does
// not know AMD's Zen 4, and on it takes the AVX2 ("Haswell") kernels although the CPU has
// AVX-512: its sgemm then runs at about a third of the speed (53 vs 145 GFLOP/s per core measured
// on a Zen 4 EPYC). A CPU it does not know at all -- a virtual machine's Intel Xeon of family 6
// model 207 (Emerald Rapids), say -- gets its SSE3 "Prescott" kernels, slower still. The choice
// can only be changed before the library loads, through the OPENBLAS_CORETYPE environment
// variable, hence the re-execution.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace stoke::nn {

/// The kernels OpenBLAS chose, e.g. "SkylakeX", "Haswell", "Zen".
std::string blas_kernels();

/// The vector units a CPU gives OpenBLAS's kernels.
enum class VectorUnits : std::uint8_t {
  older,   ///< neither of the below
  avx2,    ///< AVX2 and FMA
  avx512,  ///< AVX2, FMA and AVX-512 F, BW, DQ and VL
};
/// This CPU's (__builtin_cpu_supports); VectorUnits::older off x86-64.
VectorUnits cpu_vector_units();

/// The kernels to ask OpenBLAS for instead of `chosen` on a CPU with `units`, or "" to keep
/// them: "SkylakeX" on AVX-512 unless `chosen` is an AVX-512 kernel already (SkylakeX,
/// Cooperlake, SapphireRapids); on AVX2, "Haswell" unless `chosen` is an AVX2 kernel (Haswell,
/// Zen, Excavator) or better.
std::string better_blas_kernels(std::string_view chosen, VectorUnits units);

/// When better_blas_kernels() names kernels for this CPU and nobody set OPENBLAS_CORETYPE, sets
/// OPENBLAS_CORETYPE to them and re-executes this program (/proc/self/exe) with the same `argv`,
/// so that OpenBLAS loads again with those kernels; it does so once (STOKE_BLAS_REEXEC marks the
/// second run). Otherwise, or when re-execution fails, returns and changes nothing. Call it first
/// in main(), before any thread starts.
void use_fastest_blas_kernels(char** argv);

}  // namespace stoke::nn
