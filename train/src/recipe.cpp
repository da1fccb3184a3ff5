#include "stoke/train/recipe.hpp"

#include <cstdio>
#include <stoke/nn/models.hpp>

#include "stoke/train/builtin.hpp"
#include "stoke/train/compute.hpp"
#include "stoke/train/model_card.hpp"

namespace stoke::train {

int Recipe::image_size() const { return size > 0 ? size : default_image_size(model); }

std::unique_ptr<nn::Sequential> make_model(const Recipe& recipe, int classes, nn::Backend& backend, int channels) {
  auto model = nn::make_model(recipe.model, {.classes = classes, .in_channels = channels, .seed = recipe.seed});
  model->to(backend.device(), backend.stream());
  model->to_layout(compute_layout(recipe.channels_last, backend, recipe.precision), backend.stream());
  return model;
}

nn::TrainerOptions trainer_options(const Recipe& recipe, std::size_t train_images) {
  const std::int64_t steps = steps_per_epoch(train_images, static_cast<std::size_t>(recipe.batch), recipe.accumulate);
  return {.sgd = {.momentum = recipe.momentum, .weight_decay = recipe.weight_decay, .nesterov = recipe.momentum > 0},
          .schedule = epoch_schedule(recipe.schedule, recipe.lr, recipe.warmup, steps, recipe.epochs),
          .label_smoothing = recipe.label_smoothing,
          .accumulation = recipe.accumulate,
          .seed = recipe.seed,
          .compute = recipe.precision,
          .loss_scale = {}};
}

std::vector<std::pair<std::string, std::string>> settings_of(const Recipe& recipe) {
  // 0.05 rather than std::to_string's 0.050000.
  const auto number = [](double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", value);
    return std::string(text);
  };
  const std::string accumulated =
      recipe.accumulate > 1 ? " x " + std::to_string(recipe.accumulate) + " accumulated" : "";
  return {{"precision", precision_name(recipe.precision)},
          {"epochs", std::to_string(recipe.epochs)},
          {"batch", std::to_string(recipe.batch) + accumulated},
          {"image size", std::to_string(recipe.image_size())},
          {"learning rate", number(recipe.lr) + ", " + std::string(nn::to_string(recipe.schedule)) + ", warmup " +
                                number(recipe.warmup) + " epochs"},
          {"input threads", recipe.threads > 0 ? std::to_string(recipe.threads) : "the scheduler's choice"},
          {"autotune", recipe.autotune ? "on" : "off"},
          {"seed", std::to_string(recipe.seed)},
          {"channels-last", std::string(to_string(recipe.channels_last))}};
}

InputConfig training_input(const Recipe& recipe) {
  const int size = recipe.image_size();
  InputConfig input;
  input.batch_size = static_cast<std::size_t>(recipe.batch);
  input.size = size;
  input.transforms =
      recipe.transforms.empty() ? default_train_transforms(size, recipe.builtin_data) : recipe.transforms;
  input.threads = recipe.threads;
  input.on_error = recipe.on_error;
  input.stall.limit = recipe.stall_limit;
  input.stall.policy = recipe.on_stall;
  input.autotune = recipe.autotune;
  input.decode = default_decode_options(recipe.color);
  return input;
}

FitOptions fit_options(const Recipe& recipe, const std::vector<std::string>& classes, int channels) {
  FitOptions options;
  options.epochs = recipe.epochs;
  options.seed = recipe.seed;
  options.train_input = training_input(recipe);
  options.val_input = evaluation_input(options.train_input, default_eval_transforms(recipe.image_size()));
  options.metadata = to_metadata({.model = recipe.model,
                                  .image_size = recipe.image_size(),
                                  .classes = classes,
                                  .eval_transforms = options.val_input.transforms,
                                  .channels = channels,
                                  .color = recipe.color == nodes::DecodeColor::keep ? "keep" : "rgb"});
  return options;
}

}  // namespace stoke::train
