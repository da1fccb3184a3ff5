// The to-device and compute stages on a CUDA device: what arrives is what was sent, copies
// overlap compute, conversion matches the CPU, no pipeline thread waits on the GPU, and running
// out of device memory is a clean error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device_stages_test_support.hpp"
#include "stoke/gpu/convert.hpp"
#include "stoke/gpu/error.hpp"
#include "stoke/gpu/memory.hpp"
#include "stoke/gpu/pinned_allocator.hpp"
#include "stoke/gpu/synthetic.hpp"
#include "stoke/gpu/timeline.hpp"

namespace stoke::gpu::test {
namespace {

class DeviceStagesOnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  }
  const Device device = Device::cuda(0);
};

/// What a compute body copied back from the device: the batch's pixels and labels.
struct Readback {
  std::shared_ptr<PinnedBuffer> pixels;
  std::shared_ptr<PinnedBuffer> labels;
};

/// A compute body that copies what the compute stage made of the batch (DeviceBatch::input())
/// back to pinned host memory.
std::shared_ptr<PinnedBuffer> read_back_input(DeviceBatch& batch, StreamView stream) {
  auto back = std::make_shared<PinnedBuffer>(batch.input().bytes());
  copy_async(back->data(), batch.input().data, back->size(), stream);
  return back;
}

TEST_F(DeviceStagesOnGpu, DataArrivesByteIdentical) {
  const nodes::BatchShape shape{.batch_size = 8, .height = 33, .width = 31, .channels = 3};
  nodes::BatchPool pool(shape, 3, batch_allocator(device));
  ToDevice to_device(device, pool.shape(), {.slots = 3});
  Compute compute(device, [](DeviceBatch& batch, StreamView stream) {
    Readback back{std::make_shared<PinnedBuffer>(batch.pixels().bytes()),
                  std::make_shared<PinnedBuffer>(batch.size() * sizeof(std::int32_t))};
    copy_async(back.pixels->data(), batch.pixels().data, batch.pixels().bytes(), stream);
    copy_async(back.labels->data(), batch.device_labels(), back.labels->size(), stream);
    return back;
  });
  std::size_t checked = 0;
  run_device_pipeline(PatternSource(pool, 30), to_device, compute, [&](Computed<Readback> r) {
    const std::byte* bytes = r.value.pixels->data();
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < shape.data_bytes(); ++i)
      mismatches += static_cast<std::uint8_t>(bytes[i]) != pattern(r.sequence, i);
    EXPECT_EQ(mismatches, 0u) << "batch " << r.sequence;
    std::vector<std::int32_t> labels(r.size());
    std::memcpy(labels.data(), r.value.labels->data(), r.value.labels->size());
    EXPECT_EQ(labels, r.labels) << "batch " << r.sequence;
    ++checked;
  });
  EXPECT_EQ(checked, 30u);
  EXPECT_GT(to_device.stats().copy_time.count(), 0.0);
  EXPECT_EQ(pool.stats().free, 3u);
}

TEST_F(DeviceStagesOnGpu, CopiesOverlapCompute) {
  // 64 x 224x224x3 uint8 (9.6 MB, well under a millisecond to copy) and 3 ms of compute: with
  // overlap, batch n+1's copy starts before batch n's compute ends.
  const nodes::BatchShape shape{.batch_size = 64, .height = 224, .width = 224, .channels = 3};
  auto timeline = std::make_shared<Timeline>(device);
  nodes::BatchPool pool(shape, 4, batch_allocator(device));
  ToDevice to_device(device, pool.shape(), {.slots = 4, .timeline = timeline});
  Compute compute(device, [](DeviceBatch&, StreamView stream) { synthetic_work(stream, std::chrono::milliseconds(3)); },
                  {.timeline = timeline});
  run_device_pipeline(PatternSource(pool, 20, /*fill=*/false), to_device, compute, [](Computed<std::monostate>) {});

  std::vector<GpuSpan> copies(20);
  std::vector<GpuSpan> computes(20);
  for (const GpuSpan& span : timeline->spans())
    (span.kind == GpuSpan::Kind::copy ? copies : computes).at(span.batch) = span;
  int overlapped = 0;
  for (std::size_t n = 0; n + 1 < 20; ++n) {
    EXPECT_LE(copies[n].end_ms, computes[n].start_ms + 1e-3) << "batch " << n << " computed before it arrived";
    if (copies[n + 1].start_ms < computes[n].end_ms) ++overlapped;
  }
  EXPECT_GE(overlapped, 15) << "the copy of batch n+1 should start while batch n computes";
}

TEST_F(DeviceStagesOnGpu, ConvertOnTheDeviceMatchesTheCpu) {
  const nodes::BatchShape shape{.batch_size = 5, .height = 17, .width = 23, .channels = 3};
  nodes::BatchPool pool(shape, 2, batch_allocator(device));
  ToDevice to_device(device, pool.shape(), {.slots = 2});
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const TensorLayout layout : {TensorLayout::nchw, TensorLayout::nhwc}) {
      const ConvertOptions options{.dtype = dtype, .layout = layout};
      Compute compute(device, read_back_input, {.convert = options});
      int compared = 0;
      // sequence() keeps counting across the runs of one ToDevice; each run's source starts at 0.
      const std::uint64_t first = to_device.stats().batches;
      run_device_pipeline(PatternSource(pool, 3), to_device, compute,
                          [&](Computed<std::shared_ptr<PinnedBuffer>> r) {
                            std::vector<std::uint8_t> raw(shape.data_bytes());
                            for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = pattern(r.sequence - first, i);
                            std::vector<std::byte> expected(r.value->size());
                            convert_u8(raw.data(), expected.data(), shape.batch_size, shape.height, shape.width, 3,
                                       options, StreamView::host());
                            EXPECT_EQ(std::memcmp(expected.data(), r.value->data(), expected.size()), 0)
                                << to_string(dtype) << ' ' << to_string(layout) << " batch " << r.sequence;
                            ++compared;
                          });
      EXPECT_EQ(compared, 3);
    }
  }
}

TEST_F(DeviceStagesOnGpu, MasksTargetsBoxesAndSixteenBitPixelsArriveByteIdentical) {
  // 5 channels of int16 (pixel bytes as the pattern gives them), a uint16 mask, two targets and boxes:
  // every field crosses in its own copy and lands where DeviceBatch says.
  const nodes::BatchShape shape{.batch_size = 4, .height = 19, .width = 13, .channels = 5,
                                .pixel_type = nodes::ElementType::i16, .mask = nodes::ElementType::u16,
                                .targets = {{"age"}, {"findings", {3}}}, .max_boxes = 5, .box_extras = 2};
  nodes::BatchPool pool(shape, 2, batch_allocator(device));
  ToDevice to_device(device, pool.shape(), {.slots = 2});
  struct Back {
    std::shared_ptr<PinnedBuffer> pixels, mask, age, findings, corners, classes, extras, counts;
  };
  Compute compute(device, [](DeviceBatch& batch, StreamView stream) {
    const auto fetch = [&](const void* from, std::size_t bytes) {
      auto buffer = std::make_shared<PinnedBuffer>(bytes);
      copy_async(buffer->data(), from, bytes, stream);
      return buffer;
    };
    EXPECT_EQ(batch.pixels().dtype, DType::i16);
    EXPECT_EQ(batch.mask().dtype, DType::u16);
    const DeviceBatch::BoxFields& boxes = batch.device_boxes();
    return Back{fetch(batch.pixels().data, batch.pixels().bytes()), fetch(batch.mask().data, batch.mask().bytes()),
                fetch(batch.device_target("age"), batch.size() * sizeof(float)),
                fetch(batch.device_target("findings"), 3 * batch.size() * sizeof(float)),
                fetch(boxes.corners, batch.size() * 5 * 4 * sizeof(float)),
                fetch(boxes.classes, batch.size() * 5 * sizeof(std::int32_t)),
                fetch(boxes.extras, batch.size() * 5 * 2 * sizeof(float)),
                fetch(boxes.counts, batch.size() * sizeof(std::int32_t))};
  });
  std::size_t checked = 0;
  run_device_pipeline(PatternSource(pool, 6), to_device, compute, [&](Computed<Back> r) {
    const auto bytes = [](const std::shared_ptr<PinnedBuffer>& b) { return reinterpret_cast<const std::uint8_t*>(b->data()); };
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < shape.data_bytes(); ++i) mismatches += bytes(r.value.pixels)[i] != pattern(r.sequence, i);
    for (std::size_t i = 0; i < r.value.mask->size(); ++i) mismatches += bytes(r.value.mask)[i] != mask_pattern(r.sequence, i);
    EXPECT_EQ(mismatches, 0u) << "batch " << r.sequence;
    const auto* age = reinterpret_cast<const float*>(r.value.age->data());
    const auto* findings = reinterpret_cast<const float*>(r.value.findings->data());
    for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(age[i], target_pattern(r.sequence, 0, i));
    for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ(findings[i], target_pattern(r.sequence, 1, i));
    const auto* corners = reinterpret_cast<const float*>(r.value.corners->data());
    const auto* classes = reinterpret_cast<const std::int32_t*>(r.value.classes->data());
    const auto* extras = reinterpret_cast<const float*>(r.value.extras->data());
    const auto* counts = reinterpret_cast<const std::int32_t*>(r.value.counts->data());
    for (std::size_t i = 0; i < 4 * 5 * 4; ++i) ASSERT_EQ(corners[i], target_pattern(r.sequence, 100, i)) << i;
    for (std::size_t i = 0; i < 4 * 5 * 2; ++i) ASSERT_EQ(extras[i], target_pattern(r.sequence, 101, i)) << i;
    for (std::size_t i = 0; i < 4 * 5; ++i) ASSERT_EQ(classes[i], pattern(r.sequence, i)) << i;
    for (std::size_t i = 0; i < 4; ++i) ASSERT_EQ(counts[i], mask_pattern(r.sequence, i)) << i;
    ++checked;
  });
  EXPECT_EQ(checked, 6u);
}

TEST_F(DeviceStagesOnGpu, ConvertOfSignedSingleChannelBatchesMatchesTheCpu) {
  // CT-like int16, one channel, converted on the device: the same floats as the host conversion.
  const nodes::BatchShape shape{.batch_size = 3, .height = 21, .width = 17, .channels = 1,
                                .pixel_type = nodes::ElementType::i16};
  nodes::BatchPool pool(shape, 2, batch_allocator(device));
  ToDevice to_device(device, pool.shape(), {.slots = 2});
  const ConvertOptions options{.mean = {0.1f}, .stddev = {0.2f}, .range = 2000.0f};
  Compute compute(device, read_back_input, {.convert = options});
  int compared = 0;
  run_device_pipeline(PatternSource(pool, 3), to_device, compute, [&](Computed<std::shared_ptr<PinnedBuffer>> r) {
    std::vector<std::uint8_t> raw(shape.data_bytes());
    for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = pattern(r.sequence, i);
    std::vector<float> expected(shape.batch_size * shape.item_elements());
    convert(raw.data(), DType::i16, expected.data(), shape.batch_size, shape.height, shape.width, 1, options,
            StreamView::host());
    ASSERT_EQ(r.value->size(), expected.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(expected.data(), r.value->data(), r.value->size()), 0) << "batch " << r.sequence;
    ++compared;
  });
  EXPECT_EQ(compared, 3);
}

TEST_F(DeviceStagesOnGpu, NoPipelineThreadWaitsOnTheGpu) {
  const nodes::BatchShape shape{.batch_size = 32, .height = 64, .width = 64, .channels = 3};
  nodes::BatchPool pool(shape, 4, batch_allocator(device));
  ToDevice to_device(device, pool.shape(), {.slots = 4});
  Compute compute(device, [](DeviceBatch&, StreamView stream) { synthetic_work(stream, std::chrono::milliseconds(1)); },
                  {.streams = 2, .convert = ConvertOptions{}});
  const std::uint64_t before = host_waits_on_pipeline_threads();
  run_device_pipeline(PatternSource(pool, 40, /*fill=*/false), to_device, compute, [](Computed<std::monostate>) {});
  EXPECT_EQ(host_waits_on_pipeline_threads(), before)
      << "a oneTBB worker synchronized with the GPU; completions must come through EventWatcher";
  EXPECT_EQ(compute.stats().batches, 40u);
  EXPECT_GT(compute.stats().compute_time.count(), 40 * 0.9);  // 40 x 1 ms of GPU time, measured with events
}

TEST_F(DeviceStagesOnGpu, RunningOutOfDeviceMemoryIsACleanError) {
  // 64 slots of 4096 x 1024x1024x3 bytes: 824 GB, more than any GPU has.
  const nodes::BatchShape huge{.batch_size = 4096, .height = 1024, .width = 1024, .channels = 3};
  try {
    ToDevice to_device(device, huge, {.slots = 64});
    FAIL() << "expected CudaOutOfMemory";
  } catch (const CudaOutOfMemory& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("to-device"), std::string::npos) << message;
    EXPECT_NE(message.find("reduce the batch size"), std::string::npos) << message;
  }
  // Everything allocated before the failure was freed, and the device still works.
  const nodes::BatchShape small{.batch_size = 4, .height = 8, .width = 8, .channels = 3};
  nodes::BatchPool pool(small, 2, batch_allocator(device));
  ToDevice to_device(device, pool.shape(), {.slots = 2});
  Compute compute(device, [](DeviceBatch&, StreamView) {});
  int consumed = 0;
  run_device_pipeline(PatternSource(pool, 5), to_device, compute, [&](Computed<std::monostate>) { ++consumed; });
  EXPECT_EQ(consumed, 5);
}

TEST_F(DeviceStagesOnGpu, ManyBatchesThroughFewSlotsWaitWithoutBlocking) {
  // Two device slots and a slow compute: batches wait for a slot inside the to-device stage.
  const nodes::BatchShape shape{.batch_size = 16, .height = 32, .width = 32, .channels = 3};
  nodes::BatchPool pool(shape, 6, batch_allocator(device));
  ToDevice to_device(device, pool.shape(), {.slots = 2});
  Compute compute(device, [](DeviceBatch&, StreamView stream) { synthetic_work(stream, std::chrono::microseconds(500)); },
                  {.streams = 2, .depth = 2});
  int consumed = 0;
  run_device_pipeline(PatternSource(pool, 50), to_device, compute, [&](Computed<std::monostate>) { ++consumed; });
  EXPECT_EQ(consumed, 50);
  const TransferStats stats = to_device.stats();
  EXPECT_LE(stats.peak_slots_in_use, 2u);
  EXPECT_EQ(pool.stats().free, 6u);
}

}  // namespace
}  // namespace stoke::gpu::test
