// Faults from outside during a pass (issue 22): files that vanish or are truncated between the
// listing and the reading, and a user's transform (a plugin's) that throws from its factory or on
// one item. Each time the pass goes on, the item is skipped and named, and nothing else is lost.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <stoke/nodes/registry.hpp>
#include <stoke/nodes/transform.hpp>
#include <string>
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

}  // namespace
}  // namespace stoke::train
