#include "replica_strategy.hpp"

#include <array>
#include <cstring>
#include <span>
#include <stdexcept>
#include <stoke/dist/replicas.hpp>
#include <stoke/graph/signal.hpp>
#include <utility>

namespace stoke::train::detail {

namespace {

class Alone final : public ReplicaStrategy {
 public:
  void start(nn::Trainer&) override {}
  std::function<bool()> stop_rule() override { return {}; }
  bool agree_stop(bool mine) override { return mine; }
  bool makes_up_steps() const noexcept override { return false; }
  std::vector<double> reduce_train(EpochTotals&) override { return {}; }
  void reduce_val(EpochTotals&) override {}
  void add_sync_figures(EpochSummary&) override {}
  void check_replicas(nn::Trainer&, std::int64_t) override {}
  void before_save() override {}
  bool agree_go_on(bool mine) override { return mine; }
};

// A pass's totals summed over the ranks (its seconds: the slowest rank's).
void reduce_totals(dist::Communicator& comm, EpochTotals& t) {
  std::array<double, 6> sums{t.loss_sum,
                             static_cast<double>(t.correct),
                             static_cast<double>(t.correct_top5),
                             static_cast<double>(t.images),
                             static_cast<double>(t.batches),
                             static_cast<double>(t.skipped)};
  comm.all_reduce(std::span<double>(sums), dist::ReduceOp::sum);
  t.loss_sum = sums[0];
  t.correct = static_cast<std::int64_t>(sums[1]);
  t.correct_top5 = static_cast<std::int64_t>(sums[2]);
  t.images = static_cast<std::int64_t>(sums[3]);
  t.batches = static_cast<std::int64_t>(sums[4]);
  t.skipped = static_cast<std::uint64_t>(sums[5]);
  std::array<double, 1> seconds{t.seconds};
  comm.all_reduce(std::span<double>(seconds), dist::ReduceOp::max);
  t.seconds = seconds[0];
}

class DataParallelRanks final : public ReplicaStrategy {
 public:
  explicit DataParallelRanks(dist::Communicator& comm) : comm_(comm), step_channel_(comm.split()) {}

  void start(nn::Trainer& trainer) override {
    sync_ = trainer.options().gradient_sync;
    if (sync_ == nullptr) {
      throw std::invalid_argument("fit: a data-parallel run (" + std::to_string(comm_.world()) +
                                  " ranks) needs TrainerOptions::gradient_sync (train::DataParallel), or the "
                                  "replicas would train apart");
    }
    synced_bn_ = trainer.options().batch_norm_sync != nullptr;
    reduce_before_ = sync_->reduce_seconds();
    exposed_before_ = sync_->exposed_seconds();
    const nn::StreamView stream = trainer.backend().stream();
    dist::broadcast_state(comm_, trainer.model(), &trainer.optimizer(), stream);
    dist::check_replicas(comm_, trainer.model(), &trainer.optimizer(), stream, "the start");
  }

  // Every rank votes before each step it takes (its own batches and those it makes up), and once
  // more at the epoch's end, until a vote says stop -- after which nobody votes again. A rank cut
  // short by Ctrl-C thus meets the others' next step vote with its end vote, and a signal that
  // came after the last step still ends every rank's run. The votes go over a communicator of
  // their own (the compute stage's thread asks while this one may be in another collective).
  std::function<bool()> stop_rule() override {
    return [this] { return agree_stop(graph::SignalStop::received() > 0); };
  }
  bool agree_stop(bool mine) override {
    if (stop_agreed_) return true;
    std::int64_t flag = mine ? 1 : 0;
    step_channel_->all_reduce(std::span<std::int64_t>(&flag, 1), dist::ReduceOp::max);
    stop_agreed_ = flag > 0;
    return stop_agreed_;
  }
  bool makes_up_steps() const noexcept override { return true; }

  std::vector<double> reduce_train(EpochTotals& totals) override {
    const double mine = totals.seconds > 0 ? static_cast<double>(totals.images) / totals.seconds : 0;
    const std::vector<std::byte> all =
        comm_.all_gather(std::span<const std::byte>(reinterpret_cast<const std::byte*>(&mine), sizeof mine));
    std::vector<double> rates(static_cast<std::size_t>(comm_.world()));
    std::memcpy(rates.data(), all.data(), all.size());
    reduce_totals(comm_, totals);
    return rates;
  }
  void reduce_val(EpochTotals& totals) override { reduce_totals(comm_, totals); }

  void add_sync_figures(EpochSummary& s) override {
    s.allreduce_seconds = sync_->reduce_seconds() - std::exchange(reduce_before_, sync_->reduce_seconds());
    s.allreduce_exposed_seconds = sync_->exposed_seconds() - std::exchange(exposed_before_, sync_->exposed_seconds());
    // The step waiting for the other ranks' gradients more than it computes: the limit is the
    // all-reduce (the network, or a slower rank), not the input nor this rank's compute.
    const double busy = s.train.compute_busy * s.train.seconds;
    if (s.train.bottleneck == "train" && s.allreduce_exposed_seconds > 0.5 * busy) s.train.bottleneck = "all-reduce";
  }
  void check_replicas(nn::Trainer& trainer, std::int64_t epoch) override {
    // Batch norm's running statistics differ between the ranks unless it is synced.
    dist::check_replicas(comm_, trainer.model(), &trainer.optimizer(), trainer.backend().stream(),
                         "the end of epoch " + std::to_string(epoch), synced_bn_);
  }
  void before_save() override { comm_.barrier(); }
  bool agree_go_on(bool mine) override {
    std::int64_t stop = mine ? 0 : 1;
    comm_.all_reduce(std::span<std::int64_t>(&stop, 1), dist::ReduceOp::max);
    return stop == 0;
  }

 private:
  dist::Communicator& comm_;
  const std::unique_ptr<dist::Communicator> step_channel_;
  nn::GradientSync* sync_ = nullptr;
  bool synced_bn_ = false;
  bool stop_agreed_ = false;
  double reduce_before_ = 0;
  double exposed_before_ = 0;
};

}  // namespace

std::unique_ptr<ReplicaStrategy> make_replica_strategy(dist::Communicator* comm) {
  if (comm == nullptr || comm->world() == 1) return std::make_unique<Alone>();
  return std::make_unique<DataParallelRanks>(*comm);
}

}  // namespace stoke::train::detail
