// measure_device on the CPU device: the pipelined and the serial runs move exactly the batches
// asked for, the bandwidth is skipped with its reason, and the figures derived from the runs agree
// with them.
#include "stoke/bench/device.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace stoke::bench {
namespace {

TEST(DeviceBench, CpuRunMovesEveryBatchPipelinedAndSerially) {
  const DeviceBenchOptions options{.batch = 2, .size = 8, .batches = 5, .compute_us = 50, .slots = 2};
  int serial_starts = 0;
  const DeviceBenchResult r = measure_device(gpu::Device::cpu(), options, {.serial_starts = [&] { ++serial_starts; }});
  EXPECT_EQ(r.pipelined.batches, 5u);
  EXPECT_EQ(r.pipelined.images, 10u);
  EXPECT_EQ(r.serial.batches, 5u);
  EXPECT_EQ(r.serial.images, 10u);
  EXPECT_EQ(serial_starts, 1);
  EXPECT_FALSE(r.bandwidth.skipped.empty());
  EXPECT_FALSE(r.pipelined.gpu_util_note.empty());
  EXPECT_EQ(r.pipelined.compute.batches, 5u);
  EXPECT_GT(r.compute_busy_pct(), 0.0);
  EXPECT_LE(r.compute_busy_pct(), 100.0);
  EXPECT_DOUBLE_EQ(r.ideal_speedup(), 1.0);  // nothing to copy on the CPU: nothing to overlap
  EXPECT_DOUBLE_EQ(r.overlap_speedup(), r.images_per_sec() / r.serial_images_per_sec());
}

TEST(DeviceBench, RefusesOptionsOutOfRange) {
  EXPECT_THROW(measure_device(gpu::Device::cpu(), {.batch = 0}), std::invalid_argument);
  EXPECT_THROW(measure_device(gpu::Device::cpu(), {.batches = 0}), std::invalid_argument);
  EXPECT_THROW(measure_device(gpu::Device::cpu(), {.streams = 0}), std::invalid_argument);
}

}  // namespace
}  // namespace stoke::bench
