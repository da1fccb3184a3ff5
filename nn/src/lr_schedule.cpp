#include "stoke/nn/lr_schedule.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <stoke/base/enum_names.hpp>
#include <string>

namespace stoke::nn {

namespace {

[[noreturn]] void reject(const std::string& what) { throw std::invalid_argument("LrSchedule: " + what); }

}  // namespace

LrSchedule::LrSchedule(const LrScheduleOptions& options) : options_(options) {
  const auto& o = options;
  if (!std::isfinite(o.base_lr) || o.base_lr <= 0) {
    reject("base_lr must be finite and > 0, not " + std::to_string(o.base_lr));
  }
  if (o.warmup_steps < 0) reject("warmup_steps must be >= 0, not " + std::to_string(o.warmup_steps));
  if (!(o.warmup_start >= 0 && o.warmup_start <= 1)) {
    reject("warmup_start is a fraction of base_lr in [0, 1], not " + std::to_string(o.warmup_start));
  }
  switch (o.kind) {
    case LrScheduleKind::constant:
      break;
    case LrScheduleKind::step:
      if (o.step_size <= 0) reject("the step schedule needs step_size > 0, not " + std::to_string(o.step_size));
      if (!(o.gamma > 0 && o.gamma <= 1)) {
        reject("the step schedule needs gamma in (0, 1], not " + std::to_string(o.gamma));
      }
      break;
    case LrScheduleKind::cosine:
      if (o.total_steps <= o.warmup_steps) {
        reject("the cosine schedule needs total_steps (" + std::to_string(o.total_steps) + ") > warmup_steps (" +
               std::to_string(o.warmup_steps) + ")");
      }
      if (!(o.min_lr >= 0 && o.min_lr <= o.base_lr)) {
        reject("the cosine schedule needs min_lr in [0, base_lr = " + std::to_string(o.base_lr) + "], not " +
               std::to_string(o.min_lr));
      }
      break;
  }
}

float LrSchedule::at(std::int64_t step) const {
  if (step < 0) throw std::invalid_argument("LrSchedule::at: a negative step " + std::to_string(step));
  const auto& o = options_;
  const double base = o.base_lr;
  if (step < o.warmup_steps) {
    const double start = o.warmup_start;
    const double progress = static_cast<double>(step) / static_cast<double>(o.warmup_steps);
    return static_cast<float>(base * (start + (1.0 - start) * progress));
  }
  const std::int64_t t = step - o.warmup_steps;
  switch (o.kind) {
    case LrScheduleKind::constant:
      return o.base_lr;
    case LrScheduleKind::step:
      return static_cast<float>(base * std::pow(static_cast<double>(o.gamma), static_cast<double>(t / o.step_size)));
    case LrScheduleKind::cosine: {
      const std::int64_t span = o.total_steps - o.warmup_steps;
      if (t >= span) return o.min_lr;
      const double floor = o.min_lr;
      const double cosine = std::cos(std::numbers::pi * static_cast<double>(t) / static_cast<double>(span));
      return static_cast<float>(floor + (base - floor) * (1.0 + cosine) / 2.0);
    }
  }
  return o.base_lr;
}

namespace {

// In the order the error message lists them.
constexpr base::EnumNames<LrScheduleKind, 3> schedule_names{
    {{{LrScheduleKind::cosine, "cosine"}, {LrScheduleKind::step, "step"}, {LrScheduleKind::constant, "constant"}}}};

}  // namespace

LrScheduleKind parse_lr_schedule(std::string_view name) {
  if (const auto kind = schedule_names.find(name)) return *kind;
  throw std::invalid_argument("unknown learning-rate schedule '" + std::string(name) +
                              "' (known: " + schedule_names.choices(", ") + ")");
}

std::string_view to_string(LrScheduleKind kind) noexcept { return schedule_names.name(kind); }

}  // namespace stoke::nn
