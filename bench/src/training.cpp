#include "stoke/bench/training.hpp"

#include <algorithm>
#include <numeric>
#include <stoke/train/step_timing.hpp>

#include "stoke/bench/timing.hpp"

namespace stoke::bench {

namespace {

std::vector<double> each(const std::vector<TrainingRound>& rounds, double TrainingRound::*field) {
  std::vector<double> out;
  for (const TrainingRound& r : rounds) out.push_back(r.*field);
  return out;
}

}  // namespace

TrainingBenchResult measure_training(nn::Trainer& trainer, nn::Backend& backend, const train::BatchTensors& synthetic,
                                     const nodes::DatasetPtr& dataset, train::InputConfig input,
                                     const std::string& source, const TrainingBenchOptions& options) {
  const auto report = [&](int round, const char* phase, const TrainingRound& so_far) {
    if (options.progress) options.progress(round, phase, so_far);
  };
  const nn::Tensor pixels = train::synthetic_pixels(backend, static_cast<int>(synthetic.images.dim(0)),
                                                   static_cast<int>(synthetic.images.dim(2)));
  // Both measurements convert the uint8 pixels into the model's compute dtype and layout.
  input.convert_dtype = trainer.options().compute;
  input.convert_layout = trainer.model().layout();
  TrainingBenchResult result;
  for (int r = 0; r < options.repeats; ++r) {
    TrainingRound round;
    report(r, "compute", round);
    // The compute stage converts each uint8 batch before the step: so does the bound.
    const train::StepTiming steps =
        train::time_train_steps(trainer, backend, synthetic,
                                {.warmup = options.warmup,
                                 .seconds = options.seconds,
                                 .read_loss_every_step = true,
                                 .convert_from = pixels,
                                 .convert = {.dtype = input.convert_dtype, .layout = input.convert_layout}});
    round.compute = steps.images_per_sec();
    report(r, "pipeline", round);
    input.seed = options.seed;
    input.first_epoch = static_cast<std::uint32_t>(r);  // each round starts at another epoch's order
    const train::EpochTotals totals = train::time_pipeline_steps(
        trainer, dataset, input,
        {.warmup_batches = options.warmup, .seconds = options.seconds, .compute_bound = round.compute}, source);
    round.pipeline = static_cast<double>(totals.images) / totals.seconds;
    round.compute_busy = totals.compute_busy;
    round.bottleneck = totals.bottleneck;
    report(r, "done", round);
    result.rounds.push_back(round);
  }
  if (result.rounds.empty()) return result;
  result.compute_bound = median(each(result.rounds, &TrainingRound::compute));
  result.pipeline = median(each(result.rounds, &TrainingRound::pipeline));
  result.compute_busy = median(each(result.rounds, &TrainingRound::compute_busy));
  std::vector<std::size_t> order(result.rounds.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return result.rounds[a].pipeline < result.rounds[b].pipeline;
  });
  result.bottleneck = result.rounds[order[order.size() / 2]].bottleneck;
  return result;
}

}  // namespace stoke::bench
