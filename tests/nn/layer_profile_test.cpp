// LayerProfile: a profiled training step charges every layer's forward and backward, the loss and
// the optimizer step once per call, composites only for what their children did not take, and
// the numbers it returns are what the step did (calls counted from the model's own structure).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <stoke/nn/layer_profile.hpp>
#include <stoke/nn/models.hpp>
#include <stoke/nn/trainer.hpp>
#include <string>
#include <thread>
#include <utility>

#include "gradcheck.hpp"

namespace stoke::nn {
namespace {

using testing::random_tensor;
using Pass = LayerProfile::Pass;

std::map<std::pair<std::string, Pass>, LayerProfile::Row> by_kind(const LayerProfile& profile) {
  std::map<std::pair<std::string, Pass>, LayerProfile::Row> rows;
  for (const auto& row : profile.rows()) rows[{row.kind, row.pass}] = row;
  return rows;
}

// How many layers of each kind the model holds, counted from its description, one line per layer.
std::int64_t count_lines_starting(const std::string& text, const std::string& kind) {
  std::int64_t count = 0;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    const std::size_t colon = line.find(": ");
    const std::string body = colon == std::string::npos ? line : line.substr(colon + 2);
    if (body.rfind(kind + "(", 0) == 0) ++count;
    at = end + 1;
  }
  return count;
}

TEST(LayerProfile, KindIsTheDescriptionUpToItsArguments) {
  EXPECT_EQ(LayerProfile::kind_of("Conv2d(3, 32, kernel_size=3, stride=1, padding=1, bias=False)"), "Conv2d");
  EXPECT_EQ(LayerProfile::kind_of("Sequential(\n  (0): ReLU()\n)"), "Sequential");
  EXPECT_EQ(LayerProfile::kind_of("ReLU"), "ReLU");
}

TEST(LayerProfile, NestedCallsAreChargedExclusively) {
  LayerProfile profile;
  const StreamView host = StreamView::host();
  const auto started = std::chrono::steady_clock::now();
  profile.begin("Outer", Pass::forward, host);
  profile.begin("Inner", Pass::forward, host);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  profile.end(host);
  profile.end(host);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  auto rows = by_kind(profile);
  ASSERT_EQ(rows.size(), 2u);
  const auto& inner = rows.at({"Inner", Pass::forward});
  const auto& outer = rows.at({"Outer", Pass::forward});
  EXPECT_GE(inner.seconds, 0.030);
  // The sleep is the inner call's, not counted twice: together the rows are no more than the
  // time that passed (counted twice, they would exceed it by the inner call's 30 ms).
  EXPECT_LE(outer.seconds + inner.seconds, wall);
  EXPECT_EQ(profile.rows().front().kind, "Inner");  // slowest first
  EXPECT_DOUBLE_EQ(profile.total_seconds(), inner.seconds + outer.seconds);
  EXPECT_THROW(profile.end(host), std::logic_error);
  profile.clear();
  EXPECT_TRUE(profile.rows().empty());
}

TEST(LayerProfile, AProfiledStepTimesEveryLayerTheLossAndTheOptimizerOncePerCall) {
  const std::unique_ptr<Backend> backend = make_backend(Device::cpu());
  // Separate ReLU layers (not fused into the batch norms), so that every kind below has rows.
  auto model = make_model("small_cnn", {.classes = 4, .seed = 3, .fuse = false});
  Trainer trainer(*model, *backend, {.schedule = {.kind = LrScheduleKind::constant, .base_lr = 0.01f}});
  const Tensor images = random_tensor({4, 3, 16, 16}, 7);
  Tensor labels({4}, DType::i32);
  for (std::int32_t i = 0; i < 4; ++i) labels.data_as<std::int32_t>()[i] = i;

  trainer.train_batch(images, labels);  // not profiled
  LayerProfile profile;
  trainer.set_profile(&profile);
  constexpr int kSteps = 2;
  for (int i = 0; i < kSteps; ++i) trainer.train_batch(images, labels);
  trainer.set_profile(nullptr);
  trainer.train_batch(images, labels);  // not profiled either

  const std::string description = model->describe();
  const auto rows = by_kind(profile);
  for (const std::string kind : {"Conv2d", "BatchNorm2d", "ReLU", "Linear"}) {
    const std::int64_t layers = count_lines_starting(description, kind);
    ASSERT_GT(layers, 0) << kind << " in\n" << description;
    for (const Pass pass : {Pass::forward, Pass::backward}) {
      ASSERT_TRUE(rows.contains({kind, pass})) << kind << " " << to_string(pass);
      EXPECT_EQ(rows.at({kind, pass}).calls, kSteps * layers) << kind << " " << to_string(pass);
    }
  }
  EXPECT_EQ(rows.at({"loss", Pass::other}).calls, kSteps);
  EXPECT_EQ(rows.at({"optimizer step", Pass::other}).calls, kSteps);
  EXPECT_EQ(rows.at({"Sequential", Pass::forward}).calls, kSteps);  // the model itself, one per step
  double sum = 0;
  for (const auto& row : profile.rows()) {
    EXPECT_GE(row.seconds, 0) << row.kind;
    sum += row.seconds;
  }
  EXPECT_GT(sum, 0);
  // The model's own row is what its layers did not take: a small part of the step.
  EXPECT_LT(rows.at({"Sequential", Pass::forward}).seconds, rows.at({"Conv2d", Pass::forward}).seconds);
}

}  // namespace
}  // namespace stoke::nn
