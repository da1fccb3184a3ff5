// The MPI communicator (mpi_communicator.cpp), built when stoke::dist has MPI.
#pragma once

#include <memory>

#include "stoke/dist/communicator.hpp"

namespace stoke::dist::detail {

/// MPI_COMM_WORLD's ranks, MPI initialised on first use (finalised at exit).
std::unique_ptr<Communicator> make_mpi_communicator(const ConnectOptions& options);

}  // namespace stoke::dist::detail
