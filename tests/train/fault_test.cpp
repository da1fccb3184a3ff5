// Faults from outside during a pass (issue 22): files that vanish or are truncated between the
// listing and the reading, a user's transform (a plugin's) that throws from its factory or on one
// item, and one that hangs on an item. Each time the item is named (skipped, or reported by the
// stall watchdog) and nothing else is lost.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <stoke/nodes/pack_dataset.hpp>
#include <stoke/nodes/registry.hpp>
#include <stoke/nodes/transform.hpp>
#include <string>
#include <thread>
#include <vector>

#include "stoke/train/epoch.hpp"
#include "stoke/train/input.hpp"
#include "train_test_support.hpp"

namespace stoke::train {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

// A pass over `dataset` with a step that counts the images it gets.
EpochTotals pass(const nodes::DatasetPtr& dataset, const InputConfig& config, std::int64_t& images) {
  return run_epoch(dataset, config, gpu::Device::cpu(), gpu::StreamView::host(), [&](const BatchTensors& t) {
    images += t.labels.shape()[0];
    return StepResult{};
  });
}

std::string all_reasons(const EpochTotals& totals) {
  std::string out;
  for (const SkippedFile& f : totals.skipped_files) out += f.file + ": " + f.reason + "\n";
  return out;
}

TEST(Faults, AFileThatVanishesOrIsTruncatedAfterTheListingIsSkippedAndNamed) {
  TempDir dir;
  const fs::path root = test::write_tiny_shapes(dir) / "train";  // 16 images, listed now
  const nodes::DatasetPtr dataset = open_dataset(root);
  // Between the listing and the reading: one file goes away, another loses its second half.
  const fs::path gone = dataset->name(3), cut = dataset->name(9);
  fs::remove(gone);
  fs::resize_file(cut, fs::file_size(cut) / 2);
  InputConfig config = test::tiny_pass_input();
  config.drop_last = false;
  std::int64_t images = 0;
  const EpochTotals totals = pass(dataset, config, images);
  EXPECT_EQ(images, 14);  // every other image still batched
  EXPECT_EQ(totals.skipped, 2u);
  const std::string reasons = all_reasons(totals);
  EXPECT_THAT(reasons, HasSubstr(gone.string()));
  EXPECT_THAT(reasons, HasSubstr(cut.string()));
  EXPECT_FALSE(totals.stopped);
}

// A dataset whose file is cut in half (in place, as `cp` over it would) when item `at` is first
// read: the rest of the epoch meets a shorter pack than the one opened.
class CutsItsFileAt final : public nodes::Dataset {
 public:
  CutsItsFileAt(nodes::DatasetPtr inner, fs::path file, std::size_t at)
      : inner_(std::move(inner)), file_(std::move(file)), at_(at) {}
  std::size_t size() const noexcept override { return inner_->size(); }
  int label(std::size_t i) const override { return inner_->label(i); }
  std::string name(std::size_t i) const override { return inner_->name(i); }
  const std::vector<std::string>& classes() const noexcept override { return inner_->classes(); }
  nodes::Sample read(std::size_t i) const override {
    if (i == at_ && !cut_.exchange(true)) fs::resize_file(file_, fs::file_size(file_) / 2);
    return inner_->read(i);
  }

 private:
  nodes::DatasetPtr inner_;
  fs::path file_;
  std::size_t at_;
  mutable std::atomic<bool> cut_{false};
};

TEST(Faults, APackTruncatedMidEpochCostsTheItemsItLostNamedNotTheRun) {
  TempDir dir;
  const nodes::DatasetPtr folder = open_dataset(test::write_tiny_shapes(dir) / "train");  // 16 images
  const fs::path pack = dir.path() / "train.stoke";
  nodes::pack_dataset(*folder, pack);
  InputConfig config = test::tiny_pass_input();
  config.drop_last = false;
  config.threads = 1;  // items read in order: the cut comes after items 0..7 were
  const auto dataset = std::make_shared<CutsItsFileAt>(open_dataset(pack), pack, 8);
  std::int64_t images = 0;
  const EpochTotals totals = pass(dataset, config, images);
  EXPECT_EQ(images + static_cast<std::int64_t>(totals.skipped), 16);
  EXPECT_GE(images, 4);  // what was read before the cut, and what lay in the first half
  EXPECT_GE(totals.skipped, 1u);
  for (const SkippedFile& f : totals.skipped_files) EXPECT_THAT(f.reason, HasSubstr("truncated since it was opened"));
  EXPECT_FALSE(totals.stopped);
}

// A user's transform that throws on the item whose index is `bad`.
class ThrowsOnOne final : public nodes::Transform {
 public:
  explicit ThrowsOnOne(std::uint64_t bad) : bad_(bad) {}
  std::string_view name() const noexcept override { return "throws_on_one"; }

 protected:
  void apply_impl(nodes::Image& image, nodes::ItemRng&) const override {
    if (image.index == bad_) throw std::runtime_error("throws_on_one: a deliberate failure on this item");
  }

 private:
  std::uint64_t bad_;
};

// A user's transform that takes `ms` milliseconds on the item whose index is `slow` (a hung read,
// a plugin that all but never returns).
class SleepsOnOne final : public nodes::Transform {
 public:
  SleepsOnOne(std::uint64_t slow, int ms) : slow_(slow), ms_(ms) {}
  std::string_view name() const noexcept override { return "sleeps_on_one"; }

 protected:
  void apply_impl(nodes::Image& image, nodes::ItemRng&) const override {
    if (image.index == slow_) std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
  }

 private:
  std::uint64_t slow_;
  int ms_;
};

// Registered once in the process-wide registry, as a plugin would.
void register_test_transforms() {
  static std::once_flag once;
  std::call_once(once, [] {
    nodes::Registry::builtin().add(
        {.name = "throws_on_one",
         .doc = "throws on one item (a test's plugin)",
         .params = {{.name = "index", .type = "int", .default_value = "0", .doc = "the item", .required = false}},
         .make = [](const nodes::Params& p) -> nodes::TransformPtr {
           return std::make_shared<ThrowsOnOne>(static_cast<std::uint64_t>(p.get_int("index", 0)));
         }});
    nodes::Registry::builtin().add(
        {.name = "sleeps_on_one",
         .doc = "takes ms milliseconds on one item (a test's plugin)",
         .params = {{.name = "index", .type = "int", .default_value = "0", .doc = "the item", .required = false},
                    {.name = "ms", .type = "int", .default_value = "0", .doc = "how long", .required = false}},
         .make = [](const nodes::Params& p) -> nodes::TransformPtr {
           return std::make_shared<SleepsOnOne>(static_cast<std::uint64_t>(p.get_int("index", 0)),
                                                static_cast<int>(p.get_int("ms", 0)));
         }});
    nodes::Registry::builtin().add({.name = "throws_when_made",
                                    .doc = "its factory throws (a test's plugin)",
                                    .params = {},
                                    .make = [](const nodes::Params&) -> nodes::TransformPtr {
                                      throw std::runtime_error("throws_when_made: the plugin cannot start");
                                    }});
  });
}

TEST(Faults, AUsersTransformThatThrowsOnOneItemCostsThatItemAlone) {
  register_test_transforms();
  TempDir dir;
  const nodes::DatasetPtr dataset = open_dataset(test::write_tiny_shapes(dir) / "train");
  InputConfig config = test::tiny_pass_input({"resize size=16", "throws_on_one index=5", "normalize"});
  config.drop_last = false;
  std::int64_t images = 0;
  const EpochTotals totals = pass(dataset, config, images);
  EXPECT_EQ(images, 15);
  ASSERT_EQ(totals.skipped_files.size(), 1u);
  EXPECT_EQ(totals.skipped_files[0].file, dataset->name(5));
  EXPECT_THAT(totals.skipped_files[0].reason, HasSubstr("a deliberate failure on this item"));
}

TEST(Faults, AUsersTransformWhoseFactoryThrowsStopsThePassBeforeItStartsNamingIt) {
  register_test_transforms();
  TempDir dir;
  const nodes::DatasetPtr dataset = open_dataset(test::write_tiny_shapes(dir) / "train");
  const InputConfig config = test::tiny_pass_input({"resize size=16", "throws_when_made", "normalize"});
  std::int64_t images = 0;
  try {
    pass(dataset, config, images);
    FAIL() << "the pass ran";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("the plugin cannot start"));
  }
  EXPECT_EQ(images, 0);
}

TEST(Faults, ACallPastTheStallLimitIsReportedWithItsStageAndFile) {
  register_test_transforms();
  TempDir dir;
  const nodes::DatasetPtr dataset = open_dataset(test::write_tiny_shapes(dir) / "train");
  InputConfig config = test::tiny_pass_input({"resize size=16", "sleeps_on_one index=6 ms=600", "normalize"});
  config.drop_last = false;
  config.stall.limit = std::chrono::milliseconds(100);
  std::vector<graph::Stall> logged;
  config.stall.on_stall = [&](const graph::Stall& stall) { logged.push_back(stall); };  // the watchdog's thread alone
  std::int64_t images = 0;
  const EpochTotals totals = pass(dataset, config, images);
  EXPECT_EQ(images, 16);  // a warning: nothing lost
  ASSERT_EQ(totals.report.stalls.size(), 1u);
  const graph::Stall& stall = totals.report.stalls[0];
  EXPECT_EQ(stall.item, dataset->name(6));  // named from the stream position, through the epoch's order
  EXPECT_THAT(stall.stage, HasSubstr("decode"));
  EXPECT_TRUE(stall.returned);
  EXPECT_GE(stall.running, std::chrono::milliseconds(400));
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_EQ(logged[0].item, stall.item);
}

TEST(Faults, UnderTheFailPolicyAStalledCallFailsThePassNamingTheFile) {
  register_test_transforms();
  TempDir dir;
  const nodes::DatasetPtr dataset = open_dataset(test::write_tiny_shapes(dir) / "train");
  InputConfig config = test::tiny_pass_input({"resize size=16", "sleeps_on_one index=2 ms=500", "normalize"});
  config.stall = {.limit = std::chrono::milliseconds(100),
                  .policy = graph::OnStall::fail,
                  .grace = std::chrono::seconds(20),  // the call returns after 500 ms
                  .on_stall = [](auto&) {}};
  std::int64_t images = 0;
  try {
    pass(dataset, config, images);
    FAIL() << "the pass ran";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("past the stall limit of 0.1 s (item '" + dataset->name(2) + "')"));
  }
}

}  // namespace
}  // namespace stoke::train
