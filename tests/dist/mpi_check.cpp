// Checks of data-parallel training that need several processes, run by ctest under
// `mpirun -np 2 --oversubscribe` (tests/dist/CMakeLists.txt):
//
//   mpi_check equivalence   2 ranks x batch 32, gradients synced in buckets and batch norm synced,
//                           end K steps with the weights of 1 process x batch 64 (exit 0), or print
//                           the largest difference and exit 1
//   mpi_check throw         rank 1 throws: the job must end non-zero with rank 1's message
//   mpi_check stop          rank 1 stops itself (SIGSTOP): rank 0 must fail within the timeout,
//                           naming rank 1
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <stoke/dist/communicator.hpp>
#include <stoke/dist/gradient_sync.hpp>
#include <stoke/dist/replicas.hpp>
#include <stoke/nn/models.hpp>
#include <stoke/nn/trainer.hpp>
#include <string>
#include <vector>

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
  std::printf("rank %d: %d steps, %zu buckets, largest relative difference from 1 process x %d: %.3g at %s; "
              "all-reduce %.3f s, %.0f%% hidden\n",
              comm.rank(), kSteps, sync.buckets(), kBatch, worst, where.c_str(), stats.reduce_seconds,
              100 * stats.hidden());
  return worst <= 1e-4 && sync.buckets() > 1 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const auto timeout = mode == "stop" ? std::chrono::milliseconds(3000) : std::chrono::milliseconds(120000);
  const std::unique_ptr<dist::Communicator> comm = dist::connect({.timeout = timeout});
  try {
    if (comm->world() != 2) throw std::runtime_error("run under mpirun -np 2");
    if (mode == "equivalence") {
      const int code = equivalence(*comm);
      std::int64_t worst = code;
      comm->all_reduce(std::span<std::int64_t>(&worst, 1), dist::ReduceOp::max);
      return static_cast<int>(worst);
    }
    if (mode == "throw") {
      comm->barrier();
      if (comm->rank() == 1) throw std::runtime_error("a deliberate failure in rank 1's step");
      comm->barrier();  // rank 0 waits here until the abort ends it
      return 0;
    }
    if (mode == "stop") {
      comm->barrier();
      if (comm->rank() == 1) std::raise(SIGSTOP);
      comm->barrier();  // rank 0 times out here, naming rank 1
      return 0;
    }
    throw std::runtime_error("mode '" + mode + "': equivalence, throw or stop");
  } catch (const std::exception& error) {
    comm->abort("mpi_check: rank " + std::to_string(comm->rank()) + " of " + std::to_string(comm->world()) + ": " +
                error.what());
  }
}
