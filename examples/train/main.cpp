// Trains the small CNN on an image folder with stoke::train alone: every epoch a training pass
// through the whole graph (read -> decode + augment -> batch -> train step), a validation pass and
// a checkpoint that `stoke classify` and `stoke evaluate` can read.
//
//   stoke_example_train DATA [EPOCHS] [OUT]
//     DATA: a folder with one subfolder of images per class (a "train" folder may have a "val"
//     folder beside it); EPOCHS: default 3; OUT: the checkpoints' folder, default example-train.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <stoke/nn/models.hpp>
#include <stoke/train/builtin.hpp>
#include <stoke/train/compute.hpp>
#include <stoke/train/fit.hpp>
#include <stoke/train/model_card.hpp>
#include <string>

namespace nn = stoke::nn;
namespace st = stoke::train;

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DATA [EPOCHS] [OUT]\n", argv[0]);
    return 2;
  }
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 3;
  const std::string out = argc > 3 ? argv[3] : "example-train";
  constexpr int size = 32, batch = 32;
  const st::TrainingData data = st::open_training_data(argv[1], {}, "auto", batch);
  const st::ComputeContext compute = st::make_compute("auto", &std::cerr);
  auto model = nn::make_model("small_cnn", {.classes = static_cast<int>(data.train->classes().size()), .seed = 1});
  model->to(compute.device, compute.backend->stream());
  const auto steps = st::steps_per_epoch(data.train->size(), batch, 1);
  nn::Trainer trainer(*model, *compute.backend,
                      {.schedule = st::epoch_schedule(nn::LrScheduleKind::cosine, 0.05f, 1, steps, epochs)});

  st::FitOptions options{.epochs = epochs};
  options.train_input.batch_size = batch;
  options.train_input.size = size;
  options.train_input.transforms = st::default_train_transforms(size, /*builtin=*/false);
  options.val_input = st::evaluation_input(options.train_input, st::default_eval_transforms(size));
  options.metadata = st::to_metadata({"small_cnn", size, data.train->classes(), options.val_input.transforms});
  st::FitCallbacks callbacks{.on_epoch =
                                 [](const st::EpochSummary& s) {
                                   std::printf("epoch %lld: train loss %.3f, val top-1 %.3f, %.0f images/s\n",
                                               static_cast<long long>(s.epoch), s.train_loss, s.val_top1.value_or(0),
                                               s.images_per_sec);
                                   return true;
                                 },
                             .checkpoint = st::checkpoint_every_epoch(out)};
  const st::FitResult result = st::fit(trainer, data.train, data.val, options, callbacks);
  std::printf("example: done after epoch %lld; checkpoint %s\n", static_cast<long long>(result.epochs),
              result.checkpoint.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "stoke_example_train: %s\n", e.what());
  return 1;
}
