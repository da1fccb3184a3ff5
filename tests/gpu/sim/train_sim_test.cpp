// train::run_epoch on the simulated CUDA runtime (label cpu): the training path's host side on a
// "GPU" -- uint8 batches copied to the device, converted there, the step enqueued on the backend's
// stream and its numbers read back by event -- with no pipeline thread waiting for the device.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <stoke/gpu/memory.hpp>
#include <stoke/gpu/stream.hpp>
#include <stoke/gpu/synthetic.hpp>
#include <stoke/nodes/allocator.hpp>
#include <stoke/train/epoch.hpp>
#include <vector>

#include "fake_cudart.hpp"
#include "stoke/gpu/error.hpp"
#include "train_test_support.hpp"

namespace stoke::train {
namespace {

using namespace std::chrono_literals;
const gpu::Device gpu0 = gpu::Device::cuda(0);

class TrainOnSim : public ::testing::Test {
 protected:
  void SetUp() override {
    dataset_ = open_dataset(test::write_tiny_shapes(dir_) / "train");  // 16 images
    config_ = test::tiny_pass_input();
  }
  void TearDown() override { gpu::sim::reset_device(); }

  test::TempDir dir_;
  nodes::DatasetPtr dataset_;
  InputConfig config_;
};

TEST_F(TrainOnSim, NoPipelineThreadWaitsForTheDevice) {
  const gpu::Stream stream(gpu0);
  // Each batch's "loss" lands in device memory allocated up front (freeing device memory would
  // wait for the device: cudaFree synchronizes).
  const gpu::DeviceBuffer losses(gpu0, 4 * 2 * sizeof(float));
  int batches = 0;
  const std::uint64_t before = gpu::host_waits_on_pipeline_threads();
  const EpochTotals totals = run_epoch(dataset_, config_, gpu0, stream.view(), [&](const BatchTensors& t) {
    EXPECT_EQ(t.raw.dtype, gpu::DType::u8);        // crossed as uint8 ...
    EXPECT_EQ(t.images.dtype(), gpu::DType::f32);  // ... converted on the device
    EXPECT_EQ(t.images.device(), gpu0);
    gpu::synthetic_work(stream.view(), 2ms);  // the "step"
    float* stats = losses.as<float>() + 2 * batches;
    const float k = static_cast<float>(batches++);
    STOKE_CUDA_CHECK(gpu::sim::enqueue(stream.native(), [stats, k] {
      stats[0] = k;
      stats[1] = 1;
    }));
    return StepResult{
        .loss = {.stats = nn::Tensor::view_of(stats, {2}, gpu::DType::f32, gpu0), .dlogits = {}, .count = 4},
        .logits = {},
        .on_result = {}};
  });
  EXPECT_EQ(gpu::host_waits_on_pipeline_threads(), before) << "a pipeline thread waited for the device";
  EXPECT_EQ(totals.images, 16);
  // The numbers were read after the device wrote them: 4 x (0 + 1 + 2 + 3), one correct per batch.
  EXPECT_DOUBLE_EQ(totals.loss_sum, 24);
  EXPECT_EQ(totals.correct, 4);
}

// The pinned batch pool cannot get all its slots (pinned memory exhausted: cudaHostAlloc fails):
// the pass fails before it starts, with an error naming the allocator and the size, every slot
// already allocated is freed, nothing waits, and the next pass (memory back) runs.
TEST_F(TrainOnSim, APinnedPoolThatCannotGetItsSlotsFailsThePassNamingItAndFreesWhatItGot) {
  const gpu::Stream stream(gpu0);
  const std::size_t blocks_before = gpu::sim::host_blocks_in_use();
  const auto step = [](const BatchTensors&) { return StepResult{}; };
  gpu::sim::fail_host_alloc_after(2);  // slots 0 and 1 get memory, slot 2 does not
  try {
    run_epoch(dataset_, config_, gpu0, stream.view(), step);
    FAIL() << "the pass ran without its batch pool";
  } catch (const nodes::AllocationError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda-pinned"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bytes"), std::string::npos) << e.what();
  }
  EXPECT_EQ(gpu::sim::host_blocks_in_use(), blocks_before);  // the two slots it got are freed
  gpu::sim::fail_host_alloc_after(-1);
  EXPECT_EQ(run_epoch(dataset_, config_, gpu0, stream.view(), step).images, 16);
}

TEST_F(TrainOnSim, AStepThatThrowsHasItsWorkFinishedBeforeTheBatchSlotGoesBack) {
  const gpu::Stream stream(gpu0);
  int batches = 0;
  const std::uint64_t before = gpu::host_waits_on_pipeline_threads();
  EXPECT_THROW(run_epoch(dataset_, config_, gpu0, stream.view(),
                         [&](const BatchTensors&) -> StepResult {
                           gpu::synthetic_work(stream.view(), 1ms);  // may still read the batch
                           if (++batches == 2) throw std::runtime_error("the model broke");
                           return {};
                         }),
               graph::StageError);
  EXPECT_EQ(batches, 2);
  // The one wait of the run: the failed step's stream, synchronized before its slot was released.
  EXPECT_EQ(gpu::host_waits_on_pipeline_threads(), before + 1);
}

}  // namespace
}  // namespace stoke::train
