// How this process was launched: the rank, world size and local rank that mpirun or srun give it,
// read from the environment before anything is initialised. SLURM_PROCID alone does not count (a
// batch script has it too): under Slurm, launch with `srun --mpi=pmix`, which sets PMIx's.
#pragma once

#include <string>

namespace stoke::dist {

struct Launch {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  /// "mpirun" (Open MPI's OMPI_COMM_WORLD_*), "pmi" (MPICH, Intel MPI, srun --mpi=pmi2/pmix:
  /// PMI_RANK/PMI_SIZE or PMIX_RANK/PMIX_SIZE), or empty when no launcher started this process.
  std::string launcher{};
  bool launched() const noexcept { return !launcher.empty(); }
};

/// Reads the launcher's variables. Throws std::runtime_error naming the variable when one is set
/// but not a number, or the rank is not below the world size.
Launch detect_launch();

}  // namespace stoke::dist
