// nn's LrSchedule: warmup, constant, step decay (torch's StepLR) and cosine annealing at
// chosen steps against hand-computed values, the option checks and the schedule names.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <stoke/nn/lr_schedule.hpp>

#include "../gpu/expect_throw.hpp"

namespace stoke::nn {
namespace {

using gpu::test::expect_throw_mentioning;

TEST(LrSchedule, CosineWithWarmup) {
  // base 0.4, warmup over 10 steps from 0.1 * 0.4 = 0.04, then cosine over 100 - 10 = 90 steps to 0.
  const LrSchedule s(
      {.kind = LrScheduleKind::cosine, .base_lr = 0.4f, .total_steps = 100, .warmup_steps = 10, .warmup_start = 0.1f});
  EXPECT_FLOAT_EQ(s.at(0), 0.04f);
  EXPECT_FLOAT_EQ(s.at(5), 0.4f * (0.1f + 0.9f * 0.5f));  // 0.22, half-way through the warmup
  EXPECT_FLOAT_EQ(s.at(10), 0.4f);                        // end of warmup: the base rate
  EXPECT_FLOAT_EQ(s.at(55), 0.2f);                        // half-way through the cosine: cos(pi/2) = 0
  EXPECT_FLOAT_EQ(s.at(40), static_cast<float>(0.4 * (1 + std::cos(std::numbers::pi / 3)) / 2));  // 0.3
  EXPECT_NEAR(s.at(99), 0.4 * (1 + std::cos(std::numbers::pi * 89 / 90)) / 2, 1e-7);
  EXPECT_FLOAT_EQ(s.at(100), 0.0f);  // the end, and after it, stays at min_lr
  EXPECT_FLOAT_EQ(s.at(1000), 0.0f);
}

TEST(LrSchedule, CosineDecaysToMinLrWithoutWarmup) {
  const LrSchedule s({.kind = LrScheduleKind::cosine, .base_lr = 1.0f, .total_steps = 4, .min_lr = 0.2f});
  EXPECT_FLOAT_EQ(s.at(0), 1.0f);
  EXPECT_FLOAT_EQ(s.at(2), 0.6f);  // 0.2 + 0.8 * (1 + 0) / 2
  EXPECT_FLOAT_EQ(s.at(4), 0.2f);
  EXPECT_FLOAT_EQ(s.at(5), 0.2f);
}

TEST(LrSchedule, StepDecaysEveryStepSizeStepsAfterTheWarmup) {
  const LrSchedule s(
      {.kind = LrScheduleKind::step, .base_lr = 0.1f, .warmup_steps = 0, .step_size = 30, .gamma = 0.1f});
  EXPECT_FLOAT_EQ(s.at(0), 0.1f);
  EXPECT_FLOAT_EQ(s.at(29), 0.1f);
  EXPECT_FLOAT_EQ(s.at(30), 0.01f);
  EXPECT_FLOAT_EQ(s.at(59), 0.01f);
  EXPECT_FLOAT_EQ(s.at(60), 0.001f);

  // With 5 warmup steps from 0, the decays count from the end of the warmup.
  const LrSchedule w(
      {.kind = LrScheduleKind::step, .base_lr = 0.2f, .warmup_steps = 5, .step_size = 10, .gamma = 0.5f});
  EXPECT_FLOAT_EQ(w.at(0), 0.0f);
  EXPECT_FLOAT_EQ(w.at(1), 0.04f);
  EXPECT_FLOAT_EQ(w.at(5), 0.2f);
  EXPECT_FLOAT_EQ(w.at(14), 0.2f);
  EXPECT_FLOAT_EQ(w.at(15), 0.1f);
  EXPECT_FLOAT_EQ(w.at(25), 0.05f);
}

TEST(LrSchedule, ConstantAfterWarmup) {
  const LrSchedule s({.kind = LrScheduleKind::constant, .base_lr = 0.05f});
  EXPECT_FLOAT_EQ(s.at(0), 0.05f);
  EXPECT_FLOAT_EQ(s.at(123456), 0.05f);
  const LrSchedule w({.kind = LrScheduleKind::constant, .base_lr = 0.1f, .warmup_steps = 4, .warmup_start = 0.5f});
  EXPECT_FLOAT_EQ(w.at(0), 0.05f);
  EXPECT_FLOAT_EQ(w.at(2), 0.075f);
  EXPECT_FLOAT_EQ(w.at(4), 0.1f);
  EXPECT_EQ(w.options().warmup_steps, 4);
}

TEST(LrSchedule, RejectsOptionsThatMakeNoSchedule) {
  using K = LrScheduleKind;
  expect_throw_mentioning<std::invalid_argument>(
      [] { LrSchedule({.kind = K::cosine, .total_steps = 10, .warmup_steps = 10}); },
      "total_steps (10) > warmup_steps (10)");
  expect_throw_mentioning<std::invalid_argument>([] { LrSchedule({.kind = K::cosine}); }, "total_steps (0)");
  expect_throw_mentioning<std::invalid_argument>(
      [] { LrSchedule({.kind = K::cosine, .base_lr = 0.1f, .total_steps = 10, .min_lr = 0.2f}); }, "min_lr");
  expect_throw_mentioning<std::invalid_argument>([] { LrSchedule({.kind = K::step, .step_size = 0}); },
                                                 "step_size > 0");
  expect_throw_mentioning<std::invalid_argument>([] { LrSchedule({.kind = K::step, .step_size = 5, .gamma = 0}); },
                                                 "gamma");
  expect_throw_mentioning<std::invalid_argument>([] { LrSchedule({.kind = K::constant, .base_lr = 0}); }, "base_lr");
  expect_throw_mentioning<std::invalid_argument>([] { LrSchedule({.kind = K::constant, .warmup_steps = -1}); },
                                                 "warmup_steps");
  expect_throw_mentioning<std::invalid_argument>(
      [] { LrSchedule({.kind = K::constant, .warmup_steps = 3, .warmup_start = 1.5f}); }, "warmup_start");
  const LrSchedule s({.kind = K::constant});
  expect_throw_mentioning<std::invalid_argument>([&] { (void)s.at(-1); }, "negative step");
}

TEST(LrSchedule, ParsesItsNames) {
  EXPECT_EQ(parse_lr_schedule("cosine"), LrScheduleKind::cosine);
  EXPECT_EQ(parse_lr_schedule("step"), LrScheduleKind::step);
  EXPECT_EQ(parse_lr_schedule("constant"), LrScheduleKind::constant);
  EXPECT_EQ(to_string(LrScheduleKind::cosine), "cosine");
  expect_throw_mentioning<std::invalid_argument>([] { (void)parse_lr_schedule("linear"); },
                                                 "'linear' (known: cosine, step, constant)");
}

}  // namespace
}  // namespace stoke::nn
