// LrSchedule: the learning rate as a function of the optimizer step, with an optional linear
// warmup: constant, step decay (torch.optim.lr_scheduler.StepLR) or cosine annealing to a floor
// (CosineAnnealingLR), the schedules of the usual ImageNet recipes.
//
//   LrSchedule schedule({.kind = LrScheduleKind::cosine, .base_lr = 0.4f, .total_steps = 90 * steps_per_epoch,
//                        .warmup_steps = 5 * steps_per_epoch});
//   sgd.step(schedule.at(step));
//
// A schedule is a pure function of the step (no state to save: a resumed run asks for the step it
// resumes at), so at() is const and safe to call from any thread.
#pragma once

#include <cstdint>
#include <string_view>

namespace stoke::nn {

enum class LrScheduleKind : std::uint8_t {
  constant,  ///< base_lr after the warmup
  step,      ///< base_lr * gamma^floor(t / step_size), t counted from the end of the warmup
  cosine,    ///< min_lr + (base_lr - min_lr) (1 + cos(pi t / (total_steps - warmup_steps))) / 2
};

struct LrScheduleOptions {
  LrScheduleKind kind = LrScheduleKind::cosine;
  float base_lr = 0.1f;           ///< the rate after the warmup; > 0
  std::int64_t total_steps = 0;   ///< cosine: reaches min_lr here and stays there (> warmup_steps)
  std::int64_t warmup_steps = 0;  ///< linear from warmup_start * base_lr (step 0) to base_lr (this step)
  float warmup_start = 0.0f;      ///< a fraction of base_lr, in [0, 1]
  std::int64_t step_size = 0;     ///< step: steps between decays (> 0)
  float gamma = 0.1f;             ///< step: the factor of each decay, in (0, 1]
  float min_lr = 0.0f;            ///< cosine: the floor, in [0, base_lr]
};

class LrSchedule {
 public:
  /// Throws std::invalid_argument naming the option for a base_lr that is not finite and > 0, a
  /// negative warmup_steps, a warmup_start outside [0, 1]; for cosine a total_steps not above
  /// warmup_steps or a min_lr outside [0, base_lr]; for step a step_size <= 0 or a gamma outside
  /// (0, 1].
  explicit LrSchedule(const LrScheduleOptions& options);

  /// The learning rate for optimizer step `step` (0 for the first). Throws std::invalid_argument
  /// for a negative step.
  float at(std::int64_t step) const;

  const LrScheduleOptions& options() const noexcept { return options_; }

 private:
  LrScheduleOptions options_;
};

/// Parses "cosine", "step" or "constant" (for --lr-schedule). Throws std::invalid_argument listing
/// the names otherwise.
LrScheduleKind parse_lr_schedule(std::string_view name);
/// "constant", "step" or "cosine".
std::string_view to_string(LrScheduleKind kind) noexcept;

}  // namespace stoke::nn
