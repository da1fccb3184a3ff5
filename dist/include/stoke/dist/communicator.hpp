// Communicator: the processes of a data-parallel run -- who this one is (rank, world, local rank)
// and the host collectives between them (sums, broadcasts, barriers) -- over MPI when a launcher
// started the run, or alone (world 1) when none did.
//
//   const std::unique_ptr<Communicator> comm = connect();   // MPI under mpirun/srun, else alone
//   std::array<double, 2> counts{correct, images};
//   comm->all_reduce(counts, ReduceOp::sum);               // every rank gets the totals
//
// Every collective is called by every rank in the same order, by one thread of each process at a
// time per communicator (split() makes an independent one for another thread's traffic). A
// collective that does not complete within the timeout throws dist::Timeout naming the ranks that
// had not reached it: a rank stopped (SIGSTOP, a hung file system) ends the run in bounded time,
// never hangs it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "stoke/dist/launch.hpp"

namespace stoke::dist {

enum class ReduceOp { sum, min, max };

/// A collective that did not complete in time; what() names the operation and the ranks that had
/// not reached it.
class Timeout : public std::runtime_error {
 public:
  Timeout(const std::string& what, std::vector<int> missing) : std::runtime_error(what), missing_(std::move(missing)) {}
  /// The ranks that had not reached the collective (empty when this rank could not tell).
  const std::vector<int>& missing() const noexcept { return missing_; }

 private:
  std::vector<int> missing_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const noexcept = 0;
  virtual int world() const noexcept = 0;
  /// The rank among the processes of this node (which GPU to take), and their number.
  virtual int local_rank() const noexcept = 0;
  virtual int local_world() const noexcept = 0;
  /// "mpi (Open MPI v4.1.4), rank 1 of 2" or "local (1 process)".
  virtual std::string describe() const = 0;

  /// Element-wise reduction in place: every rank gets the result.
  virtual void all_reduce(std::span<float> values, ReduceOp op) = 0;
  virtual void all_reduce(std::span<double> values, ReduceOp op) = 0;
  virtual void all_reduce(std::span<std::int64_t> values, ReduceOp op) = 0;
  /// `bytes` of rank `root` copied to every rank's `bytes` (the same length everywhere).
  virtual void broadcast(std::span<std::byte> bytes, int root) = 0;
  /// Each rank's `bytes` (the same length everywhere), concatenated in rank order.
  virtual std::vector<std::byte> all_gather(std::span<const std::byte> bytes) = 0;
  virtual void barrier() = 0;

  /// An independent communicator over the same ranks: its collectives never match this one's, so
  /// another thread may use it at the same time (the gradient traffic beside the control traffic).
  virtual std::unique_ptr<Communicator> split() = 0;

  /// Ends every process of the run with `code`, after printing `message` (which should name the
  /// rank) on this one's stderr: MPI_Abort under MPI, std::exit alone.
  [[noreturn]] virtual void abort(const std::string& message, int code = 1) = 0;

  /// How long a collective may wait for the other ranks before it throws Timeout.
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;
  virtual std::chrono::milliseconds timeout() const noexcept = 0;

 protected:
  Communicator() = default;
};

/// A communicator of one process, rank 0 of 1: the collectives return their input.
std::unique_ptr<Communicator> make_local_communicator();

/// Whether this build has MPI (stoke::dist was built against Open MPI).
bool have_mpi() noexcept;

struct ConnectOptions {
  /// How long a collective waits for the other ranks (see Communicator::set_timeout).
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

/// The communicator of this process: over MPI (initialised once for the process, finalised at
/// exit) when detect_launch() finds a launcher's environment, alone otherwise. Throws
/// std::runtime_error when a launcher started the run but this build has no MPI, naming the fix.
std::unique_ptr<Communicator> connect(const ConnectOptions& options = {});

}  // namespace stoke::dist
