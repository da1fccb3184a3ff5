// train::fit (stoke/train/fit.hpp): the epoch loop over a tiny dataset -- its callbacks in order,
// progress, early stop, a custom checkpoint policy, the resume position, and Ctrl-C mid-epoch
// followed by a resume giving the weights of an uninterrupted run.
#include "stoke/train/fit.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <stdexcept>
#include <stoke/graph/signal.hpp>
#include <stoke/nn/checkpoint.hpp>
#include <stoke/nn/lr_schedule.hpp>
#include <stoke/train/ranks.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "train_test_support.hpp"

namespace stoke::train {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using test::TinyRun;
using ::testing::ElementsAre;
using ::testing::Pair;

class Fit : public ::testing::Test {
 protected:
  void SetUp() override { root_ = test::write_tiny_shapes(dir_); }
  nodes::DatasetPtr train_set() const { return open_dataset(root_ / "train"); }
  nodes::DatasetPtr val_set() const { return open_dataset(root_ / "val"); }

  TempDir dir_;
  fs::path root_;
};

TEST_F(Fit, TrainsEachEpochThenValidates) {
  TinyRun run(16, 2);
  std::vector<EpochSummary> epochs;
  const FitResult result =
      fit(run.trainer, train_set(), val_set(), run.options, {.on_epoch = [&](const EpochSummary& s) {
            epochs.push_back(s);
            return true;
          }});
  ASSERT_EQ(epochs.size(), 2u);
  for (std::size_t i = 0; i < epochs.size(); ++i) {
    EXPECT_EQ(epochs[i].epoch, static_cast<std::int64_t>(i + 1));
    EXPECT_EQ(epochs[i].epochs, 2);
    EXPECT_TRUE(epochs[i].completed);
    EXPECT_FALSE(epochs[i].interrupted);
    EXPECT_EQ(epochs[i].train.images, 16);  // 4 whole batches of 4
    EXPECT_EQ(epochs[i].val.images, 8);     // every validation image once
    ASSERT_TRUE(epochs[i].val_top5.has_value());
    EXPECT_EQ(*epochs[i].val_top5, 1.0);        // two classes: the label is always in the top 5
    EXPECT_TRUE(epochs[i].checkpoint.empty());  // no policy, no checkpoint
  }
  EXPECT_EQ(result.epochs, 2);
  EXPECT_EQ(run.trainer.epoch(), 2);
  EXPECT_EQ(run.trainer.step(), 8);
  EXPECT_EQ(result.images, 32);
  EXPECT_EQ(result.val_top1, epochs.back().val_top1);
  EXPECT_EQ(result.best_val_top1, std::max(*epochs[0].val_top1, *epochs[1].val_top1));
  EXPECT_FALSE(result.interrupted);
  EXPECT_FALSE(result.stopped_early);
}

TEST_F(Fit, CallsThePassAndStepHooksInOrder) {
  TinyRun run(16, 1);
  std::vector<std::string> events;
  std::vector<StepEvent> steps;
  FitCallbacks callbacks;
  callbacks.on_pass_begin = [&](std::int64_t epoch, Phase phase) {
    events.push_back("begin " + std::to_string(epoch) + " " + to_string(phase));
  };
  callbacks.on_pass_end = [&](std::int64_t epoch, Phase phase, const EpochTotals&) {
    events.push_back("end " + std::to_string(epoch) + " " + to_string(phase));
  };
  callbacks.on_step = [&](const StepEvent& e) { steps.push_back(e); };
  callbacks.on_epoch = [&](const EpochSummary&) {
    events.emplace_back("epoch");
    return true;
  };
  fit(run.trainer, train_set(), val_set(), run.options, callbacks);

  EXPECT_THAT(events, ElementsAre("begin 1 train", "end 1 train", "begin 1 evaluate", "end 1 evaluate", "epoch"));
  ASSERT_EQ(steps.size(), 4u);
  const nn::LrSchedule schedule(epoch_schedule(nn::LrScheduleKind::cosine, 0.05f, 0.5, 4, 1));
  for (std::size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].epoch, 1);
    EXPECT_EQ(steps[i].step, static_cast<std::int64_t>(i + 1));
    EXPECT_TRUE(steps[i].stepped);
    EXPECT_EQ(steps[i].images, 4);
    EXPECT_EQ(steps[i].position, 4 * (i + 1));  // items of the epoch's order behind the step
    EXPECT_FLOAT_EQ(steps[i].lr, schedule.at(static_cast<std::int64_t>(i)));
    EXPECT_GT(steps[i].loss, 0);
  }
}

TEST_F(Fit, ReportsProgressDuringAPass) {
  TinyRun run(16, 1);
  std::vector<std::pair<Phase, std::int64_t>> seen;  // phase, pass_images
  std::int64_t most_images = 0;
  FitCallbacks callbacks;
  // Steps of 100 ms make the pass last longer than the 250 ms between progress calls.
  callbacks.on_step = [](const StepEvent&) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); };
  callbacks.on_progress = [&](const FitProgress& p) {
    seen.emplace_back(p.phase, p.pass_images);
    most_images = std::max(most_images, p.totals.images);
    EXPECT_EQ(p.epoch, 1);
    EXPECT_FALSE(p.pipeline.stats().empty());
  };
  fit(run.trainer, train_set(), nullptr, run.options, callbacks);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front(), std::make_pair(Phase::train, std::int64_t{16}));
  EXPECT_GT(most_images, 0);
  EXPECT_LE(most_images, 16);
}

TEST_F(Fit, OnEpochReturningFalseEndsTheRunAfterThatEpoch) {
  TinyRun run(16, 3);
  int epochs_seen = 0;
  int checkpoints = 0;
  const FitResult result = fit(run.trainer, train_set(), val_set(), run.options,
                               {.on_epoch =
                                    [&](const EpochSummary&) {
                                      ++epochs_seen;
                                      return false;
                                    },
                                .checkpoint =
                                    [&](const EpochSummary&) {
                                      ++checkpoints;
                                      return std::vector<fs::path>{};
                                    }});
  EXPECT_EQ(epochs_seen, 1);
  EXPECT_EQ(checkpoints, 1);  // the policy still ran for the epoch that stopped the run
  EXPECT_EQ(result.epochs, 1);
  EXPECT_EQ(run.trainer.epoch(), 1);
  EXPECT_TRUE(result.stopped_early);
  EXPECT_FALSE(result.interrupted);
}

TEST_F(Fit, WritesWhereTheCheckpointPolicySays) {
  TinyRun run(16, 2);
  run.options.metadata = {{"model", "small_cnn"}};
  std::vector<fs::path> reported;
  FitCallbacks callbacks;
  callbacks.checkpoint = [&](const EpochSummary& s) {
    if (s.epoch % 2 == 1) return std::vector<fs::path>{};
    return std::vector<fs::path>{dir_ / ("mine-" + std::to_string(s.epoch) + ".safetensors")};
  };
  callbacks.on_epoch = [&](const EpochSummary& s) {
    reported.push_back(s.checkpoint);
    return true;
  };
  const FitResult result = fit(run.trainer, train_set(), val_set(), run.options, callbacks);

  EXPECT_THAT(reported, ElementsAre(fs::path(), dir_ / "mine-2.safetensors"));
  EXPECT_EQ(result.checkpoint, dir_ / "mine-2.safetensors");
  EXPECT_FALSE(fs::exists(dir_ / "mine-1.safetensors"));
  const nn::TrainingState state = nn::read_checkpoint_metadata(dir_ / "mine-2.safetensors");
  EXPECT_EQ(state.epoch, 2);
  EXPECT_THAT(state.extra, ElementsAre(Pair(epoch_order_key, epoch_order_version), Pair(epoch_position_key, "0"),
                                       Pair("model", "small_cnn")));
}

TEST_F(Fit, TheDefaultPolicyWritesLastAndEachEpoch) {
  TinyRun run(16, 2);
  const FitResult result =
      fit(run.trainer, train_set(), nullptr, run.options, {.checkpoint = checkpoint_every_epoch(dir_ / "runs" / "a")});
  for (const char* file : {"last.safetensors", "epoch_1.safetensors", "epoch_2.safetensors"}) {
    EXPECT_TRUE(fs::exists(dir_ / "runs" / "a" / file)) << file;
  }
  EXPECT_EQ(result.checkpoint, dir_ / "runs" / "a" / "last.safetensors");
  EXPECT_EQ(test::bytes_of(dir_ / "runs" / "a" / "last.safetensors"),
            test::bytes_of(dir_ / "runs" / "a" / "epoch_2.safetensors"));
}

TEST_F(Fit, StartsAtTheResumePositionInsideTheEpoch) {
  TinyRun run(16, 1);
  run.trainer.set_metadata({{epoch_position_key, "8"}, {epoch_order_key, epoch_order_version}});
  EXPECT_EQ(resume_position(run.trainer), 8u);
  std::vector<std::size_t> positions;
  const FitResult result = fit(run.trainer, train_set(), nullptr, run.options,
                               {.on_step = [&](const StepEvent& e) { positions.push_back(e.position); }});
  EXPECT_EQ(result.images, 8);  // the second half of the epoch's order
  EXPECT_THAT(positions, ElementsAre(12u, 16u));
  EXPECT_EQ(run.trainer.epoch(), 1);
  EXPECT_EQ(resume_position(run.trainer), 0u);  // the epoch is done: the next starts at its beginning
}

// A checkpoint cut inside an epoch by an older stoke counted its position in another order: it is
// refused, naming the file; one written at an epoch's end still resumes.
TEST_F(Fit, RefusesAPositionInAnOlderEpochOrder) {
  TinyRun run(16, 1);
  run.trainer.set_metadata({{epoch_position_key, "8"}});  // no epoch_order: version 1
  try {
    (void)resume_position(run.trainer, "runs/a/last.safetensors");
    ADD_FAILURE() << "an old order's position was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("runs/a/last.safetensors"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("epoch_N.safetensors"));
  }
  EXPECT_THROW(fit(run.trainer, train_set(), nullptr, run.options), std::runtime_error);
  run.trainer.set_metadata({{epoch_position_key, "0"}});
  EXPECT_EQ(resume_position(run.trainer), 0u);
}

// A dataset that asks for an order by groups (as a tar dataset opened with window=W): two halves.
class Halves final : public nodes::Dataset {
 public:
  Halves(nodes::DatasetPtr inner, std::uint32_t window) : inner_(std::move(inner)), window_(window) {}
  std::size_t size() const noexcept override { return inner_->size(); }
  int label(std::size_t i) const override { return inner_->label(i); }
  std::string name(std::size_t i) const override { return inner_->name(i); }
  nodes::Sample read(std::size_t i) const override { return inner_->read(i); }
  const std::vector<std::string>& classes() const noexcept override { return inner_->classes(); }
  nodes::Groups groups() const override {
    return {std::make_shared<const std::vector<std::uint64_t>>(std::vector<std::uint64_t>{0, size() / 2}), window_};
  }

 private:
  nodes::DatasetPtr inner_;
  std::uint32_t window_;
};

// The checkpoint names an order by groups; a resume inside an epoch of another order is refused
// (it would visit other items), one of the same order goes on from its position.
TEST_F(Fit, RefusesAResumeInsideAnEpochOfAnotherOrderByGroups) {
  TinyRun run(16, 1);
  const auto halves = std::make_shared<const Halves>(train_set(), 1);
  EXPECT_EQ(epoch_order_name({.shuffle = true, .groups = halves->groups()}), "2 groups=2 window=1");
  EXPECT_EQ(epoch_order_name({.shuffle = false, .groups = halves->groups()}), epoch_order_version);
  EXPECT_EQ(epoch_order_name({.shuffle = true}), epoch_order_version);

  run.trainer.set_metadata({{epoch_position_key, "8"}, {epoch_order_key, epoch_order_version}});
  try {
    (void)fit(run.trainer, halves, nullptr, run.options);
    ADD_FAILURE() << "a position in another order was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("(2) other than this run's (2 groups=2 window=1)"));
  }
  run.trainer.set_metadata({{epoch_position_key, "8"}, {epoch_order_key, "2 groups=2 window=1"}});
  EXPECT_EQ(resume_position(run.trainer), 8u);
  const FitResult result = fit(run.trainer, halves, nullptr, run.options);
  EXPECT_EQ(result.images, 8);
  EXPECT_EQ(run.trainer.metadata().at(epoch_order_key), "2 groups=2 window=1");
}

// Ctrl-C in the second of two epochs, then a resume from the checkpoint written at the cut: the
// final weights are those of a run never interrupted, bit for bit (the CPU backend is
// deterministic, and each batch depends only on the seed, the epoch and the position).
TEST_F(Fit, ACtrlCMidEpochThenAResumeGivesTheUninterruptedWeights) {
  // 32 images: 8 steps per epoch. on_step runs once a step's numbers are read back, and the
  // compute stage may have run up to 5 more steps by then (the results stage's queue of 4, and one
  // resolving into it): a signal at the epoch's second step still lands inside it.
  TempDir dir;
  const fs::path root = test::write_tiny_shapes(dir, 16);
  const nodes::DatasetPtr train = open_dataset(root / "train"), val = open_dataset(root / "val");
  TinyRun whole(32, 2);
  fit(whole.trainer, train, val, whole.options);
  whole.trainer.save(dir_ / "whole.safetensors");

  TinyRun cut(32, 2);
  FitResult interrupted;
  {
    const graph::SignalStop guard;
    interrupted = fit(cut.trainer, train, val, cut.options,
                      {.on_step =
                           [](const StepEvent& e) {
                             if (e.epoch == 2 && e.step == 10) std::raise(SIGINT);  // the epoch's second step
                           },
                       .checkpoint = checkpoint_every_epoch(dir_ / "cut")});
    graph::SignalStop::reset();
  }
  ASSERT_TRUE(interrupted.interrupted);
  EXPECT_EQ(interrupted.epochs, 1);
  EXPECT_EQ(interrupted.checkpoint, dir_ / "cut" / "last.safetensors");
  EXPECT_FALSE(fs::exists(dir_ / "cut" / "epoch_2.safetensors"));
  const int position =
      std::stoi(nn::read_checkpoint_metadata(dir_ / "cut" / "last.safetensors").extra.at(epoch_position_key));
  EXPECT_GE(position, 8);  // the second step and any the compute stage ran before the signal
  EXPECT_LE(position, 28);  // 32 would be the whole epoch: not interrupted
  EXPECT_EQ(position % 4, 0);

  TinyRun resumed(32, 2);
  resumed.trainer.load(dir_ / "cut" / "last.safetensors");
  const FitResult rest = fit(resumed.trainer, train, val, resumed.options);
  EXPECT_EQ(rest.images, 32 - position);
  resumed.trainer.save(dir_ / "resumed.safetensors");
  EXPECT_TRUE(test::bytes_of(dir_ / "whole.safetensors") == test::bytes_of(dir_ / "resumed.safetensors"))
      << "the resumed run's weights differ from the uninterrupted run's";
}

TEST(FitSchedule, StepsAndScheduleFollowTheEpochs) {
  EXPECT_EQ(steps_per_epoch(100, 16, 1), 6);  // whole batches only
  EXPECT_EQ(steps_per_epoch(100, 16, 4), 1);
  EXPECT_EQ(steps_per_epoch(10, 16, 1), 1);  // at least one
  EXPECT_THROW(steps_per_epoch(10, 0, 1), std::invalid_argument);
  const nn::LrScheduleOptions s = epoch_schedule(nn::LrScheduleKind::step, 0.1f, 1.5, 10, 20);
  EXPECT_EQ(s.total_steps, 200);
  EXPECT_EQ(s.warmup_steps, 15);
  EXPECT_EQ(s.step_size, 60);                                                            // x0.1 every 30% of the run
  EXPECT_EQ(epoch_schedule(nn::LrScheduleKind::cosine, 0.1f, 5, 2, 1).warmup_steps, 1);  // all steps but one
}

}  // namespace
}  // namespace stoke::train

// Alone (no launcher), Ranks is one rank whose guard is a plain call: the body's result and its
// exceptions reach the caller (with several ranks it aborts the job: dist.a_rank_that_throws_...).
TEST(Ranks, AloneTheGuardIsAPlainCall) {
  stoke::train::Ranks ranks;
  EXPECT_EQ(ranks.world(), 1);
  EXPECT_TRUE(ranks.leader());
  ranks.barrier();
  EXPECT_EQ(ranks.guard("test", [] { return 7; }), 7);
  EXPECT_THROW(ranks.guard("test", []() -> int { throw std::runtime_error("the body's"); }), std::runtime_error);
  EXPECT_EQ(stoke::train::rank_device("cuda", ranks), "cuda");
}
