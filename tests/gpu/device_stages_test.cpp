// The to-device and compute stages on the CPU device: every pipeline runs without a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "device_stages_test_support.hpp"
#include "stoke/gpu/convert.hpp"
#include "stoke/gpu/pinned_allocator.hpp"
#include "stoke/gpu/synthetic.hpp"

namespace stoke::gpu::test {
namespace {

const nodes::BatchShape small_shape{.batch_size = 4, .height = 6, .width = 5, .channels = 3};

std::uint64_t checksum(const TensorView& view) {
  const auto* bytes = static_cast<const std::uint8_t*>(view.data);
  return std::accumulate(bytes, bytes + view.bytes(), std::uint64_t{0});
}

std::uint64_t expected_checksum(std::uint64_t b) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < small_shape.data_bytes(); ++i) sum += pattern(b, i);
  return sum;
}

TEST(DeviceStagesOnCpu, BatchesPassThroughInOrderWithTheirData) {
  nodes::BatchPool pool(small_shape, 3, batch_allocator(Device::cpu()));
  ToDevice to_device(Device::cpu(), pool.shape(), {.slots = pool.slots()});
  Compute compute(Device::cpu(), [](DeviceBatch& batch, StreamView stream) {
    EXPECT_TRUE(stream.is_host());
    EXPECT_EQ(batch.device(), Device::cpu());
    EXPECT_EQ(batch.ready(), nullptr);
    return checksum(batch.input());
  });
  std::vector<Computed<std::uint64_t>> results;
  const graph::RunReport report = run_device_pipeline(PatternSource(pool, 25), to_device, compute,
                                                      [&](Computed<std::uint64_t> r) { results.push_back(std::move(r)); });
  ASSERT_EQ(results.size(), 25u);
  for (std::uint64_t b = 0; b < 25; ++b) {
    const auto& r = results[b];
    EXPECT_EQ(r.sequence, b);
    EXPECT_EQ(r.value, expected_checksum(b)) << "batch " << b;
    ASSERT_EQ(r.size(), small_shape.batch_size);
    EXPECT_EQ(r.labels[1], static_cast<std::int32_t>(b * 1000 + 1));
    EXPECT_EQ(r.indices[3], b * small_shape.batch_size + 3);
  }
  EXPECT_EQ(to_device.stats().batches, 25u);
  EXPECT_EQ(compute.stats().batches, 25u);
  EXPECT_EQ(compute.stats().items, 100u);
  EXPECT_EQ(report.consumed, 25u);
}

TEST(DeviceStagesOnCpu, MasksAndTargetsPassThroughWithThePixels) {
  const nodes::BatchShape shape{.batch_size = 3, .height = 5, .width = 4, .channels = 1,
                                .pixel_type = nodes::ElementType::i16, .mask = nodes::ElementType::u8,
                                .targets = {{"age"}, {"findings", {2}}}};
  nodes::BatchPool pool(shape, 2, batch_allocator(Device::cpu()));
  ToDevice to_device(Device::cpu(), pool.shape(), {.slots = pool.slots()});
  struct Fields {
    TensorView pixels;
    std::vector<std::uint8_t> mask;
    std::vector<float> age;
    std::vector<float> findings;
  };
  Compute compute(Device::cpu(), [](DeviceBatch& batch, StreamView) {
    const TensorView mask = batch.mask();
    EXPECT_EQ(mask.dtype, DType::u8);
    EXPECT_EQ(mask.c, 1);
    const auto* m = static_cast<const std::uint8_t*>(mask.data);
    const float* age = batch.device_target("age");
    const float* findings = batch.device_target(1);
    EXPECT_THROW(batch.device_target("weight"), std::out_of_range);
    return Fields{batch.pixels(), {m, m + mask.bytes()}, {age, age + batch.size()},
                  {findings, findings + 2 * batch.size()}};
  });
  std::size_t checked = 0;
  const std::uint64_t bytes_before = to_device.stats().bytes;
  run_device_pipeline(PatternSource(pool, 4), to_device, compute, [&](Computed<Fields> r) {
    EXPECT_EQ(r.value.pixels.dtype, DType::i16);
    EXPECT_EQ(r.value.pixels.bytes(), shape.data_bytes());
    for (std::size_t i = 0; i < r.value.mask.size(); ++i)
      ASSERT_EQ(r.value.mask[i], mask_pattern(r.sequence, i)) << "mask byte " << i << " of batch " << r.sequence;
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(r.value.age[i], target_pattern(r.sequence, 0, i));
    for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(r.value.findings[i], target_pattern(r.sequence, 1, i));
    ++checked;
  });
  EXPECT_EQ(checked, 4u);
  // Pixels, masks, labels and targets cross; indices and names stay on the host.
  EXPECT_EQ(to_device.stats().bytes - bytes_before, 4 * (shape.data_bytes() + 3 * 20 + 3 * 4 + 3 * 4 + 6 * 4));
}

TEST(DeviceStagesOnCpu, BoxesCrossWithTheirCountsAndClasses) {
  const nodes::BatchShape shape{.batch_size = 2, .height = 4, .width = 4, .max_boxes = 3, .box_extras = 1};
  nodes::BatchPool pool(shape, 2, batch_allocator(Device::cpu()));
  ToDevice to_device(Device::cpu(), pool.shape(), {.slots = pool.slots()});
  Compute compute(Device::cpu(), [](DeviceBatch& batch, StreamView) {
    const DeviceBatch::BoxFields& boxes = batch.device_boxes();
    EXPECT_NE(boxes.corners, nullptr);
    return std::vector<std::int32_t>{boxes.counts[0], boxes.counts[1], boxes.classes[0], boxes.classes[5],
                                     static_cast<std::int32_t>(boxes.corners[4 * 3 + 2]),
                                     static_cast<std::int32_t>(boxes.extras[3])};
  });
  graph::Pipeline pipe({.threads = 2});
  std::vector<std::vector<std::int32_t>> seen;
  pipe.source("source",
              [&, b = 0]() mutable -> std::optional<nodes::Batch> {
                if (b++ == 2) return std::nullopt;
                nodes::Batch batch = pool.acquire();
                batch.set_size(2);
                std::fill(batch.boxes().begin(), batch.boxes().end(), 0.0f);
                std::fill(batch.box_classes().begin(), batch.box_classes().end(), -1);
                batch.box_counts()[0] = 1;
                batch.box_counts()[1] = 3;
                batch.box_classes()[0] = 40 + b;
                batch.box_classes()[5] = 50 + b;
                batch.boxes()[4 * 3 + 2] = 7.0f * static_cast<float>(b);  // item 1, box 0, x1
                batch.box_extras()[3] = 9.0f;
                return batch;
              })
      .async<DeviceBatch>("to-device", to_device, ToDevice::stage_options())
      .async<Computed<std::vector<std::int32_t>>>("compute", compute, compute.stage_options())
      .sink("collect", [&](Computed<std::vector<std::int32_t>> r) { seen.push_back(r.value); }, {.ordered = true});
  pipe.run();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (std::vector<std::int32_t>{1, 3, 41, 51, 7, 9}));
  EXPECT_EQ(seen[1], (std::vector<std::int32_t>{1, 3, 42, 52, 14, 9}));
}

TEST(DeviceStagesOnCpu, AVariableSizeBatchCrossesInItsOwnFrame) {
  const nodes::BatchShape shape{.batch_size = 2, .height = 8, .width = 8, .channels = 1, .variable_size = true};
  nodes::BatchPool pool(shape, 1, batch_allocator(Device::cpu()));
  ToDevice to_device(Device::cpu(), pool.shape(), {.slots = 1});
  Compute compute(Device::cpu(), [](DeviceBatch& batch, StreamView) {
    return std::vector<std::int32_t>{batch.pixels().h, batch.pixels().w, static_cast<std::int32_t>(batch.pixels().bytes()),
                                     batch.device_item_sizes()[2], batch.item_sizes()[3]};
  });
  graph::Pipeline pipe({.threads = 2});
  std::vector<std::vector<std::int32_t>> seen;
  pipe.source("source",
              [&, done = false]() mutable -> std::optional<nodes::Batch> {
                if (std::exchange(done, true)) return std::nullopt;
                nodes::Batch batch = pool.acquire();
                batch.set_size(2);
                batch.set_extent(cv::Size(5, 3));
                const std::int32_t sizes[] = {3, 5, 2, 4};
                std::copy(std::begin(sizes), std::end(sizes), batch.item_sizes().begin());
                return batch;
              })
      .async<DeviceBatch>("to-device", to_device, ToDevice::stage_options())
      .async<Computed<std::vector<std::int32_t>>>("compute", compute, compute.stage_options())
      .sink("collect", [&](Computed<std::vector<std::int32_t>> r) { seen.push_back(r.value); });
  pipe.run();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<std::int32_t>{3, 5, 2 * 3 * 5, 2, 4}));
}

TEST(DeviceStagesOnCpu, ThePoolBoundHoldsAndEverySlotComesBack) {
  nodes::BatchPool pool(small_shape, 2, batch_allocator(Device::cpu()));
  ToDevice to_device(Device::cpu(), pool.shape(), {.slots = pool.slots()});
  Compute compute(Device::cpu(), [](DeviceBatch&, StreamView stream) {
    synthetic_work(stream, std::chrono::microseconds(200));
  }, {.streams = 2, .depth = 2});
  std::atomic<int> consumed{0};
  run_device_pipeline(PatternSource(pool, 40), to_device, compute,
                      [&](Computed<std::monostate>) { ++consumed; });
  EXPECT_EQ(consumed.load(), 40);
  const nodes::BatchPoolStats stats = pool.stats();
  EXPECT_LE(stats.peak_in_use, 2u);
  EXPECT_EQ(stats.free, 2u) << "every host slot is back in the pool";
}

TEST(DeviceStagesOnCpu, ConvertGivesTheNormalizedFloatInput) {
  nodes::BatchPool pool(small_shape, 2, batch_allocator(Device::cpu()));
  ToDevice to_device(Device::cpu(), pool.shape(), {.slots = 2});
  const ConvertOptions convert{};  // ImageNet mean/std, f32 NCHW
  Compute compute(Device::cpu(), [&](DeviceBatch& batch, StreamView) {
    const TensorView in = batch.input();
    EXPECT_EQ(in.dtype, DType::f32);
    EXPECT_EQ(in.layout, TensorLayout::nchw);
    EXPECT_EQ(in.n, small_shape.batch_size);
    // Element (item 1, channel 2, row 3, column 4) against the formula on the raw NHWC byte.
    const auto* raw = static_cast<const std::uint8_t*>(batch.pixels().data);
    const std::size_t hw = static_cast<std::size_t>(in.h) * static_cast<std::size_t>(in.w);
    const std::uint8_t v = raw[((1 * in.h + 3) * in.w + 4) * 3 + 2];
    const float expected = (static_cast<float>(v) / 255.0f - convert.mean[2]) / convert.stddev[2];
    const float got = static_cast<const float*>(in.data)[(1 * 3 + 2) * hw + 3 * static_cast<std::size_t>(in.w) + 4];
    return got == expected;
  }, {.convert = convert});
  int good = 0;
  run_device_pipeline(PatternSource(pool, 6), to_device, compute, [&](Computed<bool> r) { good += r.value ? 1 : 0; });
  EXPECT_EQ(good, 6);
}

TEST(DeviceStagesOnCpu, AnErrorInTheCallableNamesTheComputeStage) {
  nodes::BatchPool pool(small_shape, 2, batch_allocator(Device::cpu()));
  ToDevice to_device(Device::cpu(), pool.shape(), {.slots = 2});
  Compute compute(Device::cpu(), [](DeviceBatch& batch, StreamView) {
    if (batch.sequence() == 3) throw std::runtime_error("loss is NaN");
  });
  try {
    run_device_pipeline(PatternSource(pool, 10), to_device, compute, [](Computed<std::monostate>) {});
    FAIL() << "expected a StageError";
  } catch (const graph::StageError& error) {
    EXPECT_EQ(error.stage(), "compute");
    EXPECT_NE(std::string(error.what()).find("loss is NaN"), std::string::npos) << error.what();
  }
  EXPECT_EQ(pool.stats().free, 2u) << "a failed run still returns every slot";
}

TEST(DeviceStagesOnCpu, ABatchOfAnotherShapeIsRejectedNamingBoth) {
  nodes::BatchPool pool(small_shape, 2);
  nodes::BatchShape other = small_shape;
  other.height = 7;
  ToDevice to_device(Device::cpu(), other, {.slots = 2});
  Compute compute(Device::cpu(), [](DeviceBatch&, StreamView) {});
  try {
    run_device_pipeline(PatternSource(pool, 2), to_device, compute, [](Computed<std::monostate>) {});
    FAIL() << "expected a StageError";
  } catch (const graph::StageError& error) {
    EXPECT_EQ(error.stage(), "to-device");
    const std::string message = error.what();
    EXPECT_NE(message.find(small_shape.describe()), std::string::npos) << message;
    EXPECT_NE(message.find(other.describe()), std::string::npos) << message;
  }
}

TEST(DeviceStagesOnCpu, BadOptionsAreRejected) {
  EXPECT_THROW(Compute(Device::cpu(), [](DeviceBatch&, StreamView) {}, {.streams = 0}), std::invalid_argument);
  EXPECT_THROW(Compute(Device::cpu(), [](DeviceBatch&, StreamView) {}, {.depth = 0}), std::invalid_argument);
  EXPECT_THROW(ToDevice(Device::cpu(), small_shape, {.slots = 0}), std::invalid_argument);
  ConvertOptions bad;
  bad.stddev[1] = 0;
  EXPECT_THROW(Compute(Device::cpu(), [](DeviceBatch&, StreamView) {}, {.convert = bad}), std::invalid_argument);
}

TEST(DeviceStagesOnCpu, AStarvedComputeStageShowsInItsStats) {
  // The source is slow and compute fast: the compute stage waits for batches most of the run,
  // the figure the scheduler works on.
  nodes::BatchPool pool(small_shape, 2);
  ToDevice to_device(Device::cpu(), pool.shape(), {.slots = 2});
  Compute compute(Device::cpu(), [](DeviceBatch&, StreamView) {});
  graph::Pipeline pipe({.threads = 2});
  PatternSource source(pool, 10);
  pipe.source("source",
              [&]() {
                std::this_thread::sleep_for(std::chrono::milliseconds(3));
                return source();
              })
      .async<DeviceBatch>("to-device", to_device, ToDevice::stage_options())
      .async<Computed<std::monostate>>("compute", compute, compute.stage_options())
      .sink("collect", [](Computed<std::monostate>) {});
  const graph::RunReport report = pipe.run();
  const auto& stage = report.stages[2];
  ASSERT_EQ(stage.name, "compute");
  EXPECT_GT(stage.starved, stage.busy) << "starved " << stage.starved.count() << " ns, busy " << stage.busy.count();
}

TEST(DeviceStagesOnCpu, CancellingReturnsEverySlot) {
  nodes::BatchPool pool(small_shape, 3);
  ToDevice to_device(Device::cpu(), pool.shape(), {.slots = 3});
  Compute compute(Device::cpu(), [](DeviceBatch&, StreamView stream) {
    synthetic_work(stream, std::chrono::microseconds(100));
  });
  graph::Pipeline pipe({.threads = 3});
  int consumed = 0;
  pipe.source("source", PatternSource(pool, 1000000))
      .async<DeviceBatch>("to-device", to_device, ToDevice::stage_options())
      .async<Computed<std::monostate>>("compute", compute, compute.stage_options())
      .sink("collect", [&](Computed<std::monostate>) {
        if (++consumed == 20) {
          pool.close();  // a source blocked in acquire() wakes up
          pipe.cancel();
        }
      });
  try {
    pipe.run();
  } catch (const graph::StageError&) {  // the source's acquire() may report the closed pool
  }
  EXPECT_EQ(pool.stats().free, 3u);
}

}  // namespace
}  // namespace stoke::gpu::test
