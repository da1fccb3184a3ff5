// A `stoke train --report` run's page on a GPU (label gpu; skipped without one): the compute step's
// busy share agrees in the summary card, the plot and the epoch table, as on the CPU (report_test),
// and NVML's utilization, where the driver gives it, is its own card.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/nvml_monitor.hpp>

#include "stoke/train/report.hpp"
#include "train_test_support.hpp"

namespace stoke::train {
namespace {

namespace fs = std::filesystem;

TEST(RecordFitOnGpu, TheComputeBusyOfTheSummaryThePlotAndTheEpochTableAgree) {
  if (gpu::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << gpu::cuda_unavailable_reason();
  const gpu::Device device = gpu::Device::cuda(0);
  const test::TempDir dir;
  const fs::path root = test::write_tiny_shapes(dir, 64);
  test::TinyRun run(128, 2, device);
  const gpu::NvmlMonitor nvml(device, std::chrono::milliseconds(20));
  RunRecorder rec;
  const fs::path page = dir / "run.html";
  fit(run.trainer, open_dataset(root / "train"), open_dataset(root / "val"), run.options,
      record_fit(rec, {}, {.html = page, .title = "gpu", .settings = {}, .gpu_busy = [&]() -> std::optional<double> {
                             if (const auto stats = nvml.stats(); stats.last)
                               return stats.last->utilization_pct / 100.0;
                             return std::nullopt;
                           }}));
  const test::ReportBusy busy = test::report_busy(test::bytes_of(page));
  ASSERT_GE(busy.table, 0) << "no epoch table";
  EXPECT_NEAR(busy.table, busy.train_stage, 0.05) << "the epoch table is the train stage's";
  EXPECT_NEAR(busy.card, busy.drawn, 0.002) << "the card is the plot's mean";
  EXPECT_NEAR(busy.card, busy.table, 0.05) << "the card and the epoch table";
  if (nvml.available()) {
    EXPECT_GE(busy.gpu_card, 0) << "NVML's utilization has a card of its own";
  } else {
    EXPECT_EQ(busy.gpu_card, -1) << nvml.unavailable_reason();
  }
}

}  // namespace
}  // namespace stoke::train
