// Checks of data-parallel training that need several processes, run by ctest under
// `mpirun -np 2 --oversubscribe` (tests/dist/CMakeLists.txt):
//
//   mpi_check equivalence   2 ranks x batch 32, gradients synced in buckets and batch norm synced,
//                           end K steps with the weights of 1 process x batch 64 (exit 0), or print
//                           the largest difference and exit 1
//   mpi_check throw         rank 1 throws: the job must end non-zero with rank 1's message
//   mpi_check stop          rank 1 stops itself (SIGSTOP): rank 0 must fail within the timeout,
//                           naming rank 1
//   mpi_check resume DIR    fit() on 2 ranks x batch 4 with sync BN, cut by a Ctrl-C on rank 0 only
//                           (both ranks stop at the same step), resumed by 1 process x batch 8 from
//                           rank 0's checkpoint: it goes on at the same item and ends with the weights
//                           of an uninterrupted 2-rank run
//   mpi_check skips DIR     fit() on 2 ranks over a training set with a corrupt file: the rank whose
//                           share loses it makes the step up, and both ranks take every step
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <stoke/dist/communicator.hpp>
#include <stoke/dist/gradient_sync.hpp>
#include <stoke/dist/replicas.hpp>
#include <stoke/graph/signal.hpp>
#include <stoke/nn/checkpoint.hpp>
#include <stoke/nn/models.hpp>
#include <stoke/nn/trainer.hpp>
#include <stoke/train/data_parallel.hpp>
#include <stoke/train/fit.hpp>
#include <stoke/train/ranks.hpp>
#include <string>
#include <vector>

#include "train_test_support.hpp"

namespace {

using namespace stoke;

constexpr int kBatch = 64;  // the whole step's batch; each of 2 ranks takes 32
constexpr int kSize = 16;
constexpr int kClasses = 4;
constexpr int kSteps = 4;

// Step s's batch: the same on every rank (a function of s only).
std::pair<std::vector<float>, std::vector<float>> batch(int step) {
  std::mt19937 rng(1000 + static_cast<unsigned>(step));
  std::normal_distribution<float> pixel(0.5f, 1.0f);
  std::vector<float> images(static_cast<std::size_t>(kBatch) * 3 * kSize * kSize);
  for (float& v : images) v = pixel(rng);
  std::vector<float> labels(kBatch);
  for (int i = 0; i < kBatch; ++i) labels[static_cast<std::size_t>(i)] = static_cast<float>((i * 7 + step) % kClasses);
  return {images, labels};
}

// Rows r, r + world, ... of a batch: rank r's share, as nodes::EpochOrder shards an epoch.
std::pair<nn::Tensor, nn::Tensor> share(const std::vector<float>& images, const std::vector<float>& labels, int rank,
                                        int world) {
  const std::size_t row = 3 * kSize * kSize;
  std::vector<float> x;
  std::vector<std::int32_t> y;
  for (int i = rank; i < kBatch; i += world) {
    x.insert(x.end(), images.begin() + static_cast<std::ptrdiff_t>(i * row),
             images.begin() + static_cast<std::ptrdiff_t>((i + 1) * row));
    y.push_back(static_cast<std::int32_t>(labels[static_cast<std::size_t>(i)]));
  }
  const auto n = static_cast<std::int64_t>(y.size());
  nn::Tensor labels_tensor = nn::Tensor::zeros({n}, nn::DType::i32);
  std::copy(y.begin(), y.end(), labels_tensor.data_as<std::int32_t>());
  return {nn::Tensor::from_values({n, 3, kSize, kSize}, x), labels_tensor};
}

nn::TrainerOptions options() {
  return {.sgd = {.momentum = 0.9f, .weight_decay = 5e-4f, .nesterov = false},
          .schedule = {.kind = nn::LrScheduleKind::constant, .base_lr = 0.05f, .total_steps = kSteps}};
}

int equivalence(dist::Communicator& comm) {
  auto backend = nn::make_backend(nn::Device::cpu());
  // The reference: one process, the whole batch.
  auto reference = nn::make_model("small_cnn", {.classes = kClasses, .seed = 3});
  nn::Trainer alone(*reference, *backend, options());
  // This rank's replica: its share of each batch; small buckets, so several start during backward.
  auto replica = nn::make_model("small_cnn", {.classes = kClasses, .seed = 3});
  dist::GradientSync sync(*replica, *backend, dist::host_transport(comm.split()), {.bucket_bytes = 64 << 10});
  dist::CommunicatorSum bn_sum(comm.split());
  nn::TrainerOptions synced = options();
  synced.gradient_sync = &sync;
  synced.batch_norm_sync = &bn_sum;
  nn::Trainer trainer(*replica, *backend, synced);
  for (int step = 0; step < kSteps; ++step) {
    const auto [images, labels] = batch(step);
    const auto whole = share(images, labels, 0, 1);
    alone.train_batch(whole.first, whole.second);
    const auto mine = share(images, labels, comm.rank(), comm.world());
    trainer.train_batch(mine.first, mine.second);
  }
  // Summation order differs (each rank's mean over 32 images, summed, halved; one mean over 64),
  // so the weights agree to float rounding amplified by K steps, not bit for bit: 1e-4 relative
  // is ~1000x the rounding of one step and far below what one skipped sync changes (~1e-2).
  double worst = 0;
  std::string where;
  std::vector<std::vector<float>> expected;
  reference->for_each_parameter([&](const std::string&, nn::Parameter& p) { expected.push_back(p.value.to_vector()); });
  reference->for_each_buffer([&](const std::string&, nn::Tensor& t) { expected.push_back(t.to_vector()); });
  std::size_t k = 0;
  const auto compare = [&](const std::string& name, const nn::Tensor& t) {
    const std::vector<float> got = t.to_vector();
    const std::vector<float>& want = expected[k++];
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double d = std::abs(double(got[i]) - double(want[i])) / (1 + std::abs(double(want[i])));
      if (d > worst) {
        worst = d;
        where = name + "[" + std::to_string(i) + "]";
      }
    }
  };
  replica->for_each_parameter([&](const std::string& name, nn::Parameter& p) { compare(name, p.value); });
  replica->for_each_buffer([&](const std::string& name, nn::Tensor& t) { compare(name, t); });
  const dist::TransportStats stats = sync.stats();
  std::printf(
      "rank %d: %d steps, %zu buckets, largest relative difference from 1 process x %d: %.3g at %s; "
      "all-reduce %.3f s, %.0f%% hidden\n",
      comm.rank(), kSteps, sync.buckets(), kBatch, worst, where.c_str(), stats.reduce_seconds, 100 * stats.hidden());
  return worst <= 1e-4 && sync.buckets() > 1 ? 0 : 1;
}

// ---- fit() across ranks, on 64 training images of 16 px shapes

namespace fs = std::filesystem;

// A fit run of small_cnn at a constant learning rate (so that 2 ranks x batch b and 1 process x
// batch 2b take the same steps at the same rates), gradients and batch norm synced over `comm` by
// train::DataParallel (as `stoke train` does) when it has ranks.
struct Run {
  Run(dist::Communicator& comm, std::size_t batch)
      : backend(nn::make_backend(nn::Device::cpu())),
        model(nn::make_model("small_cnn", {.classes = 2, .seed = 3, .width = 8})),
        replicas(comm, nn::Device::cpu(), *backend, *model, {.bucket_bytes = 16 << 10, .sync_bn = true}) {
    nn::TrainerOptions settings{
        .schedule = {.kind = nn::LrScheduleKind::constant, .base_lr = 0.05f, .total_steps = 100}, .seed = 3};
    replicas.attach(settings);
    trainer = std::make_unique<nn::Trainer>(*model, *backend, settings);
    options.epochs = 2;
    options.seed = 5;
    options.train_input.batch_size = batch;
    options.train_input.size = 16;
    options.train_input.transforms = {"resize size=16", "random_horizontal_flip", "normalize"};
    options.train_input.threads = 1;
    options.train_input.autotune = false;
    options.val_input = train::evaluation_input(options.train_input, {"resize size=16", "normalize"});
    options.communicator = &comm;
  }
  std::unique_ptr<nn::Backend> backend;
  std::unique_ptr<nn::Sequential> model;
  train::DataParallel replicas;
  std::unique_ptr<nn::Trainer> trainer;
  train::FitOptions options;
};

double largest_difference(nn::Layer& a, nn::Layer& b) {
  std::vector<std::vector<float>> want;
  b.for_each_parameter([&](const std::string&, nn::Parameter& p) { want.push_back(p.value.to_vector()); });
  double worst = 0;
  std::size_t k = 0;
  a.for_each_parameter([&](const std::string&, nn::Parameter& p) {
    const std::vector<float> got = p.value.to_vector();
    for (std::size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::abs(double(got[i]) - double(want[k][i])) / (1 + std::abs(double(want[k][i]))));
    }
    ++k;
  });
  return worst;
}

// Rank 0 writes the dataset; every rank opens it after.
fs::path shared_dataset(dist::Communicator& comm, const fs::path& dir) {
  if (comm.rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    nodes::write_shapes_dataset({.out = dir / "shapes",
                                 .classes = 2,
                                 .train_per_class = 32,
                                 .val_per_class = 4,
                                 .size = 16,
                                 .seed = 1,
                                 .quality = 90,
                                 .force = false,
                                 .threads = 1});
  }
  comm.barrier();
  return dir / "shapes";
}

int resume(dist::Communicator& comm, const fs::path& dir) {
  const fs::path root = shared_dataset(comm, dir);
  const nodes::DatasetPtr train_set = train::open_dataset(root / "train"), val_set = train::open_dataset(root / "val");
  // The uninterrupted run: 2 ranks x batch 4, 2 epochs of 8 steps. (on_step runs once a step's
  // numbers are read back, up to 5 steps after the compute stage took it: a Ctrl-C at the second
  // step of epoch 2 lands inside the epoch.)
  Run whole(comm, 4);
  train::fit(*whole.trainer, train_set, val_set, whole.options);
  // The same, cut by a Ctrl-C that only rank 0 receives, in the second epoch.
  Run cut(comm, 4);
  train::FitResult interrupted;
  {
    const graph::SignalStop guard;
    interrupted = train::fit(*cut.trainer, train_set, val_set, cut.options,
                             {.on_step =
                                  [&](const train::StepEvent& e) {
                                    if (comm.rank() == 0 && e.epoch == 2 && e.step == 10) std::raise(SIGINT);
                                  },
                              .checkpoint = train::checkpoint_every_epoch(dir / "cut")});
    graph::SignalStop::reset();
  }
  std::int64_t steps[2] = {cut.trainer->step(), interrupted.interrupted ? 1 : 0};
  const auto all = comm.all_gather(std::as_bytes(std::span(steps)));
  std::int64_t theirs[4];
  std::memcpy(theirs, all.data(), sizeof theirs);
  if (theirs[0] != theirs[2] || theirs[1] != 1 || theirs[3] != 1) {
    std::printf("rank %d: the ranks did not stop together: steps %lld and %lld, interrupted %lld and %lld\n",
                comm.rank(), static_cast<long long>(theirs[0]), static_cast<long long>(theirs[2]),
                static_cast<long long>(theirs[1]), static_cast<long long>(theirs[3]));
    return 1;
  }
  comm.barrier();
  if (comm.rank() != 0) return 0;
  // Rank 0 alone (a world of 1) resumes with twice the batch: the same items per step.
  const fs::path checkpoint = dir / "cut" / "last.safetensors";
  const auto alone = dist::make_local_communicator();
  Run resumed(*alone, 8);
  resumed.trainer->load(checkpoint);
  const std::size_t position = train::resume_position(*resumed.trainer);
  std::vector<std::size_t> positions;
  const train::FitResult rest =
      train::fit(*resumed.trainer, train_set, val_set, resumed.options,
                 {.on_step = [&](const train::StepEvent& e) { positions.push_back(e.position); }});
  const double worst = largest_difference(*resumed.model, *whole.model);
  std::printf(
      "resume: 2 ranks stopped at step %lld, item %zu of epoch 2; 1 process went on from there (first step "
      "to item %zu), %lld images; weights vs the uninterrupted 2-rank run: %.3g\n",
      static_cast<long long>(theirs[0]), position, positions.empty() ? 0 : positions.front(),
      static_cast<long long>(rest.images), worst);
  const bool ok = position > 0 && position < 64 && position % 8 == 0 && !positions.empty() &&
                  positions.front() == position + 8 && rest.images == static_cast<std::int64_t>(64 - position) &&
                  worst <= 1e-4;
  return ok ? 0 : 1;
}

int skips(dist::Communicator& comm, const fs::path& dir) {
  const fs::path root = shared_dataset(comm, dir);
  if (comm.rank() == 0) {  // a 65th training file that is not a JPEG: skipped by the decode stage
    std::ofstream(root / "train" / fs::path(train::open_dataset(root / "train")->name(0)).parent_path().filename() /
                  "broken.jpg")
        << "not a jpeg";
  }
  comm.barrier();
  const nodes::DatasetPtr train_set = train::open_dataset(root / "train");
  Run run(comm, 4);
  run.options.epochs = 3;
  const train::FitResult result = train::fit(*run.trainer, train_set, nullptr, run.options);
  std::int64_t mine[3] = {run.trainer->step(), result.made_up_steps, static_cast<std::int64_t>(result.skipped)};
  const auto all = comm.all_gather(std::as_bytes(std::span(mine)));
  std::int64_t both[6];
  std::memcpy(both, all.data(), sizeof both);
  if (comm.rank() == 0) {
    std::printf(
        "skips: %zu training files, steps %lld and %lld (8 per epoch planned), made up %lld and %lld, "
        "skipped %lld (counted over the ranks)\n",
        train_set->size(), static_cast<long long>(both[0]), static_cast<long long>(both[3]),
        static_cast<long long>(both[1]), static_cast<long long>(both[4]), static_cast<long long>(both[2]));
  }
  return both[0] == 24 && both[3] == 24 && both[1] + both[4] >= 1 && both[2] >= 1 ? 0 : 1;
}

// Every mode runs inside train::Ranks::guard: an exception in one rank ends both, naming the rank
// (the "throw" mode's test checks the message).
int run_mode(const std::string& mode, int argc, char** argv, dist::Communicator& comm) {
  if (comm.world() != 2) throw std::runtime_error("run under mpirun -np 2");
  if (mode == "equivalence" || mode == "resume" || mode == "skips") {
    if (mode != "equivalence" && argc < 3) throw std::runtime_error(mode + " needs a folder");
    const int code = mode == "equivalence" ? equivalence(comm)
                     : mode == "resume"    ? resume(comm, argv[2])
                                           : skips(comm, argv[2]);
    std::int64_t worst = code;
    comm.all_reduce(std::span<std::int64_t>(&worst, 1), dist::ReduceOp::max);
    return static_cast<int>(worst);
  }
  if (mode == "throw") {
    comm.barrier();
    if (comm.rank() == 1) throw std::runtime_error("a deliberate failure in rank 1's step");
    comm.barrier();  // rank 0 waits here until the abort ends it
    return 0;
  }
  if (mode == "stop") {
    comm.barrier();
    if (comm.rank() == 1) std::raise(SIGSTOP);
    comm.barrier();  // rank 0 times out here, naming rank 1
    return 0;
  }
  throw std::runtime_error("mode '" + mode + "': equivalence, resume, skips, throw or stop");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const auto timeout = mode == "stop" ? std::chrono::milliseconds(3000) : std::chrono::milliseconds(120000);
  train::Ranks ranks(timeout);
  return ranks.guard("mpi_check", [&] { return run_mode(mode, argc, argv, ranks.communicator()); });
}
