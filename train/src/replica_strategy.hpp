// What fit() does at a few named points to keep the ranks of a run together, chosen once when the
// run starts: alone, nothing; data-parallel, the collectives over the communicator. fit() itself
// asks no question about ranks.
//
//   the start           start(): every replica takes rank 0's state, and the checksums agree
//   before each step    stop_rule() / agree_stop(): the ranks stop at the same step (a Ctrl-C)
//   a short share       makes_up_steps(): its missing steps made up, so the others' steps find it
//   a pass's end        reduce_train() / reduce_val(): the figures become the world's
//   an epoch's end      add_sync_figures(), check_replicas(), before_save(), agree_go_on()
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stoke/train/fit.hpp"

namespace stoke::train::detail {

class ReplicaStrategy {
 public:
  virtual ~ReplicaStrategy() = default;

  /// Checks that the trainer suits the strategy (throws std::invalid_argument) and brings every
  /// replica to rank 0's state.
  virtual void start(nn::Trainer& trainer) = 0;

  /// The compute stage's stop rule, asked before each step; empty: its own Ctrl-C check.
  virtual std::function<bool()> stop_rule() = 0;
  /// Whether the run stops here, `mine` being this rank's wish. Once it says yes, it always does.
  virtual bool agree_stop(bool mine) = 0;
  /// Whether a share that ran short of its planned batches makes the missing steps up.
  virtual bool makes_up_steps() const noexcept = 0;

  /// A training pass's totals become the whole world's; returns each rank's images/s (empty alone).
  virtual std::vector<double> reduce_train(EpochTotals& totals) = 0;
  /// A validation pass's totals become the whole world's.
  virtual void reduce_val(EpochTotals& totals) = 0;
  /// The epoch's all-reduce seconds (and those the step waited for) into `summary`, and
  /// "all-reduce" as its bottleneck when the step waited more than half its busy time.
  virtual void add_sync_figures(EpochSummary& summary) = 0;
  /// At the end of `epoch` (from 1): throws std::runtime_error naming the ranks whose state
  /// differs from rank 0's.
  virtual void check_replicas(nn::Trainer& trainer, std::int64_t epoch) = 0;
  /// Before rank 0 writes the checkpoints: every rank has stepped to here.
  virtual void before_save() = 0;
  /// Whether the run goes on after an epoch, `mine` being this rank's callbacks' answer: one
  /// rank's early stop stops them all.
  virtual bool agree_go_on(bool mine) = 0;
};

/// Alone when `comm` is null or has one rank, else data-parallel over `comm` (which must outlive it).
std::unique_ptr<ReplicaStrategy> make_replica_strategy(dist::Communicator* comm);

}  // namespace stoke::train::detail
