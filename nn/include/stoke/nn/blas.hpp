// The BLAS under nn's CPU backend (OpenBLAS), and making sure it runs its fastest kernels.
//
//   int main(int argc, char** argv) {
//     stoke::nn::use_fastest_blas_kernels(argv);   // first thing: may re-execute the program
//
// OpenBLAS picks its kernels for the CPU when it is loaded. Debian 12's OpenBLAS (0.3.21) does
// not know AMD's Zen 4, and on it takes the AVX2 ("Haswell") kernels although the CPU has
// AVX-512: its sgemm then runs at about a third of the speed (53 vs 145 GFLOP/s per core measured
// on a Zen 4 EPYC). The choice can only be changed before the library loads, through the
// OPENBLAS_CORETYPE environment variable, hence the re-execution.
#pragma once

#include <string>

namespace stoke::nn {

/// The kernels OpenBLAS chose, e.g. "SkylakeX", "Haswell", "Zen".
std::string blas_kernels();

/// When OpenBLAS chose AVX2 kernels on a CPU with AVX-512 (F, BW, DQ and VL) and nobody set
/// OPENBLAS_CORETYPE, sets OPENBLAS_CORETYPE=SkylakeX and re-executes this program
/// (/proc/self/exe) with the same `argv`, so that OpenBLAS loads again with the AVX-512 kernels;
/// it does so once (STOKE_BLAS_REEXEC marks the second run). Otherwise, or when re-execution
/// fails, returns and changes nothing. Call it first in main(), before any thread starts.
void use_fastest_blas_kernels(char** argv);

}  // namespace stoke::nn
