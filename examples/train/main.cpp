// Trains the small CNN on an image folder with stoke::train alone: every epoch a training pass
// through the whole graph (read -> decode + augment -> batch -> train step), a validation pass and
// a checkpoint that `stoke classify` and `stoke evaluate` can read.
//
//   stoke_example_train DATA [EPOCHS] [OUT]
//   mpirun -np 2 stoke_example_train DATA [EPOCHS] [OUT]      # data-parallel, as `stoke train`
//     DATA: a folder with one subfolder of images per class (a "train" folder may have a "val"
//     folder beside it); EPOCHS: default 3; OUT: the checkpoints' folder, default example-train.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <stoke/train/ranks.hpp>
#include <stoke/train/run.hpp>
#include <string>

namespace st = stoke::train;

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DATA [EPOCHS] [OUT]\n", argv[0]);
    return 2;
  }
  // `stoke train`'s defaults (SGD with Nesterov momentum, a cosine schedule with a warmup epoch,
  // random crops and flips), for the small CNN at 32 px.
  const st::Recipe recipe{.model = "small_cnn", .epochs = argc > 2 ? std::atoi(argv[2]) : 3, .batch = 32, .size = 32};
  const std::string out = argc > 3 ? argv[3] : "example-train";
  // One rank alone, or each rank of a job that mpirun (or srun) started: the gradients are then
  // averaged over the ranks, each trains on its share of every epoch and rank 0 prints and saves.
  // A rank that fails ends the job, naming itself.
  st::Ranks ranks;
  return ranks.guard("stoke_example_train", [&] {
    st::Run run(recipe, st::open_training_data(argv[1], {}, "auto", recipe.batch),
                st::make_compute(st::rank_device("auto", ranks), ranks.leader() ? &std::cerr : nullptr),
                {.communicator = &ranks.communicator()});

    st::FitCallbacks callbacks{.on_epoch =
                                   [&ranks](const st::EpochSummary& s) {
                                     if (!ranks.leader()) return true;
                                     std::printf("epoch %lld: train loss %.3f, val top-1 %.3f, %.0f images/s\n",
                                                 static_cast<long long>(s.epoch), s.train_loss, s.val_top1.value_or(0),
                                                 s.images_per_sec);
                                     return true;  // false would stop here
                                   },
                               .checkpoint = st::checkpoint_every_epoch(out)};
    const st::FitResult result = run.fit(callbacks);
    if (ranks.leader()) {
      std::printf("example: done after epoch %lld; checkpoint %s\n", static_cast<long long>(result.epochs),
                  result.checkpoint.c_str());
    }
    return 0;
  });
} catch (const std::exception& e) {
  std::fprintf(stderr, "stoke_example_train: %s\n", e.what());
  return 1;
}
