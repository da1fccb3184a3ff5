// Ranks: the processes of a run -- this one alone, or rank r of a job that mpirun (or srun)
// started -- and the rule that keeps a job from hanging: a rank that fails ends every rank, naming
// itself, rather than leaving the others waiting at their next collective until the timeout.
//
//   train::Ranks ranks;                                   // MPI under a launcher, else alone
//   return ranks.guard("stoke train", [&] {
//     train::Run run(recipe, data, make_compute(rank_device("auto", ranks), nullptr),
//                    {.communicator = &ranks.communicator()});
//     run.fit(callbacks);
//     return 0;
//   });
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <stoke/dist/communicator.hpp>
#include <string>
#include <string_view>

namespace stoke::train {

class Ranks {
 public:
  /// Connects (dist::connect): a collective waits `timeout` for the other ranks before it throws,
  /// naming the ranks that did not come. Throws std::runtime_error when a launcher started the run
  /// but this build has no MPI, naming the fix.
  explicit Ranks(std::chrono::milliseconds timeout = std::chrono::minutes(5));
  ~Ranks();
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  int rank() const noexcept { return rank_; }
  int world() const noexcept { return world_; }
  /// Rank 0: the one that speaks for the run (prints, writes the report and the checkpoints).
  bool leader() const noexcept { return rank_ == 0; }
  /// Waits until every rank has come here.
  void barrier();
  /// What Run, DataParallel and fit take (RunOptions::communicator).
  dist::Communicator& communicator() noexcept { return *comm_; }
  const dist::Communicator& communicator() const noexcept { return *comm_; }

  /// Returns `body()`. Alone, what it throws goes to the caller; with several ranks an exception
  /// ends the whole job (every rank exits non-zero) with "<who>: rank R of N: <what>" on stderr.
  int guard(std::string_view who, const std::function<int()>& body);

 private:
  std::unique_ptr<dist::Communicator> comm_;
  int rank_ = 0;
  int world_ = 1;
};

/// `device` for this rank (rank_device in data_parallel.hpp): "cuda" or "auto" become
/// "cuda:<local rank>" when there are several ranks.
std::string rank_device(const std::string& device, const Ranks& ranks);

}  // namespace stoke::train
