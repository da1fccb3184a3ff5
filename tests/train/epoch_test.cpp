// train::run_epoch (stoke/train/epoch.hpp): the one compute path of training, evaluation and
// classification -- uint8 batches on the host, converted and normalized in the compute stage, the
// step's numbers read back in batch order.
#include "stoke/train/epoch.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <chrono>
#include <mutex>
#include <thread>
#include <stoke/nodes/allocator.hpp>
#include <stoke/nodes/normalize.hpp>
#include <vector>

#include "train_test_support.hpp"

namespace stoke::train {
namespace {

using test::TempDir;

// Host memory that remembers the size of every block asked for.
class RecordingAllocator final : public nodes::Allocator {
 public:
  std::string_view name() const noexcept override { return "recording"; }
  std::vector<std::size_t> sizes() const {
    std::lock_guard lock(mutex_);
    return sizes_;
  }

 protected:
  void* allocate_impl(std::size_t bytes, std::size_t alignment) override {
    {
      std::lock_guard lock(mutex_);
      sizes_.push_back(bytes);
    }
    return nodes::host_allocator()->allocate(bytes, alignment);
  }
  void deallocate_impl(void* block, std::size_t bytes, std::size_t alignment) noexcept override {
    nodes::host_allocator()->deallocate(block, bytes, alignment);
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::size_t> sizes_;
};

class RunEpoch : public ::testing::Test {
 protected:
  void SetUp() override {
    dataset_ = open_dataset(test::write_tiny_shapes(dir_) / "train");  // 16 images
    config_ = test::tiny_pass_input({"resize size=16", "normalize mean=0.5,0.25,0.125 std=0.5,0.5,0.25"});
  }

  TempDir dir_;
  nodes::DatasetPtr dataset_;
  InputConfig config_;
};

TEST_F(RunEpoch, ShipsUint8BatchesAndNormalizesThemInTheComputeStage) {
  const auto allocator = std::make_shared<RecordingAllocator>();
  config_.allocator = allocator;
  const std::array<float, 3> mean{0.5f, 0.25f, 0.125f}, stddev{0.5f, 0.5f, 0.25f};
  std::size_t checked = 0, mismatches = 0;
  const EpochTotals totals = run_epoch(dataset_, config_, gpu::Device::cpu(), gpu::StreamView::host(),
                                       [&](const BatchTensors& t) -> StepResult {
                                         EXPECT_EQ(t.raw.dtype, gpu::DType::u8);
                                         EXPECT_EQ(t.raw.layout, gpu::TensorLayout::nhwc);
                                         EXPECT_EQ(t.images.dtype(), gpu::DType::f32);
                                         EXPECT_EQ(t.images.shape(), (nn::Shape{4, 3, 16, 16}));
                                         // images[n][c][y][x] == (raw[n][y][x][c] / 255 - mean[c]) / stddev[c]
                                         const auto* raw = static_cast<const std::uint8_t*>(t.raw.data);
                                         const std::span<const float> images = t.images.f32();
                                         for (std::size_t n = 0; n < 4; ++n) {
                                           for (std::size_t p = 0; p < 16 * 16; ++p) {
                                             for (std::size_t c = 0; c < 3; ++c) {
                                               const float in = raw[(n * 256 + p) * 3 + c];
                                               const float want = (in / 255.0f - mean[c]) / stddev[c];
                                               if (images[(n * 3 + c) * 256 + p] != want) ++mismatches;
                                             }
                                           }
                                         }
                                         ++checked;
                                         return StepResult{};
                                       });
  EXPECT_EQ(checked, 4u);
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(totals.images, 16);
  // Every block the host allocated for batches holds uint8 pixels: a float batch's pixels alone
  // would take 4 x 4 x 16 x 16 x 3 bytes.
  const std::vector<std::size_t> sizes = allocator->sizes();
  ASSERT_FALSE(sizes.empty());
  const std::size_t u8_pixels = 4 * 16 * 16 * 3;
  for (const std::size_t size : sizes) {
    EXPECT_GE(size, u8_pixels);
    EXPECT_LT(size, 4 * u8_pixels) << "a float batch on the host";
  }
}

TEST_F(RunEpoch, ReadsEachStepsNumbersBackInBatchOrder) {
  std::vector<std::uint64_t> stepped, reported;
  const EpochTotals totals = run_epoch(
      dataset_, config_, gpu::Device::cpu(), gpu::StreamView::host(), [&](const BatchTensors& t) {
        const auto k = static_cast<float>(stepped.size());
        stepped.push_back(t.indices.front());
        StepResult r;
        // A "loss" of k / 4 with k correct, and logits ranking class 0 first
        r.loss = {.stats = nn::Tensor::from_values({2}, {k / 4, k}), .dlogits = {}, .count = 4};
        r.logits = nn::Tensor::from_values({4, 2}, {1, 0, 1, 0, 1, 0, 1, 0});
        r.on_result = [&, k](const StepOutcome& o) {
          if (!o.loss) return ADD_FAILURE() << "no loss read back";
          EXPECT_EQ(o.loss->loss, k / 4);
          EXPECT_EQ(o.loss->correct, static_cast<std::int64_t>(k));
          EXPECT_EQ(o.classes, 2u);
          EXPECT_EQ(o.row(3)[0], 1.0f);
          reported.push_back(o.indices.front());
        };
        return r;
      });
  EXPECT_EQ(stepped, (std::vector<std::uint64_t>{0, 4, 8, 12}));
  EXPECT_EQ(reported, stepped);
  EXPECT_EQ(totals.batches, 4);
  EXPECT_DOUBLE_EQ(totals.loss_sum, 4 * (0 + 0.25 + 0.5 + 0.75));
  EXPECT_EQ(totals.correct, 0 + 1 + 2 + 3);
  EXPECT_EQ(totals.correct_top5, 16);  // two classes: every label is in the top 5
}

TEST_F(RunEpoch, WithoutANormalizeTheComputeStageScalesToOne) {
  config_.transforms = {"resize size=16"};
  float largest = 0;
  run_epoch(dataset_, config_, gpu::Device::cpu(), gpu::StreamView::host(), [&](const BatchTensors& t) -> StepResult {
    for (const float v : t.images.f32()) {
      EXPECT_GE(v, 0.0f);
      largest = std::max(largest, v);
    }
    return StepResult{};
  });
  EXPECT_GT(largest, 0.5f);
  EXPECT_LE(largest, 1.0f);
}

}  // namespace
}  // namespace stoke::train

namespace stoke::train {
namespace {

// One pipeline for several epochs: every step of epoch e runs before at_end(e), every step of
// e + 1 after it returns; meanwhile the input stages prepare epoch e + 1.
TEST_F(RunEpoch, RunEpochsHoldsTheNextEpochUntilTheEpochsEndReturns) {
  ComputePath path(dataset_, config_, gpu::Device::cpu(), gpu::StreamView::host());
  std::vector<std::string> events;
  const graph::RunReport report = path.run_epochs(
      [&](const BatchTensors& t) {
        events.push_back("step " + std::to_string(t.epoch));
        return StepResult{.loss = {.stats = nn::Tensor::from_values({2}, {1, 2}), .dlogits = {}, .count = 4},
                          .logits = {},
                          .on_result = {}};
      },
      {.stage = "train", .progress = {}, .window = {}}, {.epoch = 5, .skip = 0, .trace_file = {}}, 3,
      [&](std::uint32_t epoch, EpochTotals& totals) {
        events.push_back("end " + std::to_string(epoch));
        EXPECT_EQ(totals.images, 16) << epoch;
        EXPECT_EQ(totals.correct, 8) << epoch;
        EXPECT_FALSE(totals.stopped);
        // Its own report: the stages' work in this epoch, the gate among them.
        bool gate = false;
        for (const graph::StageStats& s : totals.report.stages) gate |= s.name == "epoch-gate";
        EXPECT_TRUE(gate);
        return true;
      });
  const std::vector<std::string> expected = {"step 5", "step 5", "step 5", "step 5", "end 5", "step 6", "step 6",
                                             "step 6", "step 6", "end 6", "step 7", "step 7", "step 7", "step 7",
                                             "end 7"};
  EXPECT_EQ(events, expected);
  EXPECT_EQ(report.produced, 48u);  // three epochs through one pipeline
}

TEST_F(RunEpoch, RunEpochsEndsWhenTheEpochsEndSaysSo) {
  ComputePath path(dataset_, config_, gpu::Device::cpu(), gpu::StreamView::host());
  int steps = 0, ends = 0;
  path.run_epochs([&](const BatchTensors&) { ++steps; return StepResult{}; },
                  {.stage = "train", .progress = {}, .window = {}}, {}, 3, [&](std::uint32_t, EpochTotals&) {
                    ++ends;
                    return false;
                  });
  EXPECT_EQ(ends, 1);
  EXPECT_EQ(steps, 4);  // the next epoch's batches, prepared meanwhile, were never stepped
  // The path serves another pass afterwards (its pools are all back).
  EXPECT_EQ(path.run([&](const BatchTensors&) { return StepResult{}; }).images, 16);
}

TEST_F(RunEpoch, RunEpochsPassesOnWhatTheEpochsEndThrows) {
  ComputePath path(dataset_, config_, gpu::Device::cpu(), gpu::StreamView::host());
  EXPECT_THROW(path.run_epochs([&](const BatchTensors&) { return StepResult{}; },
                               {.stage = "train", .progress = {}, .window = {}}, {}, 2,
                               [&](std::uint32_t, EpochTotals&) -> bool { throw std::runtime_error("disk full"); }),
               std::runtime_error);
}

}  // namespace
}  // namespace stoke::train

namespace stoke::train {
namespace {

// Progress during a later epoch of run_epochs sees that epoch's stage stats, not the run's.
TEST_F(RunEpoch, RunEpochsProgressCountsTheEpochsOwnWork) {
  ComputePath path(dataset_, config_, gpu::Device::cpu(), gpu::StreamView::host());
  std::uint32_t epoch = 0;
  std::uint64_t most_in_second_epoch = 0, least_in_second_epoch = 100;
  int calls_in_second_epoch = 0;
  path.run_epochs(
      [&](const BatchTensors& t) {
        epoch = t.epoch;
        std::this_thread::sleep_for(std::chrono::milliseconds(120));  // 4 steps: about 0.5 s per epoch
        return StepResult{};
      },
      {.stage = "train",
       .progress =
           [&](const EpochTotals& totals, const graph::Pipeline&) {
             if (epoch != 1) return;
             ++calls_in_second_epoch;
             for (const graph::StageStats& s : totals.report.stages)
               if (s.name == "train") {
                 most_in_second_epoch = std::max(most_in_second_epoch, s.items_out);
                 least_in_second_epoch = std::min(least_in_second_epoch, s.items_out);
               }
           },
       .window = {}},
      {}, 2, [](std::uint32_t, EpochTotals&) { return true; });
  ASSERT_GT(calls_in_second_epoch, 0);
  EXPECT_LE(most_in_second_epoch, 4u);  // the run's figure would count the first epoch's 4 too
  EXPECT_GE(least_in_second_epoch, 1u);  // called from the results stage: a batch of it is through
}

}  // namespace
}  // namespace stoke::train
