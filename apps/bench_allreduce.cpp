// stoke_bench_allreduce: what data-parallel gradient sync costs on CPU ranks. Run alone (world 1)
// or under mpirun; every rank trains the same model on random images of its own (fixed seed),
// and rank 0 prints, per model and configuration:
//
//   none      the plain Trainer step, no gradient sync (with several ranks the replicas drift
//             apart: it shows the compute alone, on cores the ranks share)
//   sync N    nn::Trainer with dist::GradientSync over dist::host_transport (comm.split()), buckets
//             of N MiB: the default 25 MiB (PyTorch DDP's) and a small one (1 MiB), which starts
//             the first buckets while backward still runs
//
// with the median step time (the slowest rank's), the images/s of all ranks together, the
// all-reduce time per step (TransportStats::reduce_seconds, in ms, mean over the ranks), the part
// of it the step waited for (exposed_seconds), the share hidden under backward (as
// TransportStats::hidden()), the gradient MiB per step and the buckets. A `result ...` line per
// configuration follows, in seconds, for scripts (scripts/bench-allreduce.sh).
//
//   stoke_bench_allreduce --threads 1                       # world 1: the baseline
//   mpirun -np 2 --oversubscribe stoke_bench_allreduce --threads 1
//
// --threads caps oneTBB (the CPU backend's kernels) per rank with tbb::global_control, as
// `stoke bench graph --threads` does; OpenBLAS already runs one thread per call (CpuBackend).
#include <oneapi/tbb/global_control.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <stoke/bench/timing.hpp>
#include <stoke/dist/communicator.hpp>
#include <stoke/dist/gradient_sync.hpp>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/models.hpp>
#include <stoke/nn/tensor.hpp>
#include <stoke/nn/trainer.hpp>
#include <string>
#include <vector>

namespace {

using namespace stoke;
using Clock = std::chrono::steady_clock;

struct ModelSpec {
  std::string name;
  int size = 32;
};

struct Options {
  int batch = 32;
  int warmup = 2;
  int steps = 5;
  int threads = 1;
  double small_bucket_mb = 1;
  double default_bucket_mb = 25;
  double timeout_s = 300;
  bool skip_none = false;
  std::vector<ModelSpec> models{{"small_cnn", 32}, {"resnet18", 64}};
};

constexpr const char* usage =
    "usage: stoke_bench_allreduce [options]   (alone, or under mpirun -np N)\n"
    "  --batch B            images per rank per step (32)\n"
    "  --warmup W           untimed steps per configuration (2)\n"
    "  --steps N            timed steps per configuration (5)\n"
    "  --threads T          oneTBB threads per rank (1; 0: oneTBB's default, all cores)\n"
    "  --models LIST        model:size,... (small_cnn:32,resnet18:64)\n"
    "  --small-bucket-mb M  the small bucket size (1); the default one is --bucket-mb (25)\n"
    "  --bucket-mb M        the default bucket size (25, as stoke train --bucket-mb)\n"
    "  --no-baseline        skip the configuration without sync\n"
    "  --dist-timeout S     seconds a collective waits for the other ranks (300)\n";

std::vector<ModelSpec> parse_models(const std::string& list) {
  std::vector<ModelSpec> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    if (!item.empty()) {
      ModelSpec spec;
      const std::size_t colon = item.find(':');
      spec.name = item.substr(0, colon);
      spec.size = colon == std::string::npos ? (spec.name == "small_cnn" ? 32 : 64) : std::stoi(item.substr(colon + 1));
      if (spec.size < 8) throw std::invalid_argument("--models: size of " + spec.name + " must be at least 8");
      out.push_back(spec);
    }
    start = comma + 1;
  }
  if (out.empty()) throw std::invalid_argument("--models: no model named");
  return out;
}

// Returns nullopt to go on, or the exit code.
std::optional<int> parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage, stdout);
      return 0;
    } else if (arg == "--batch") {
      o.batch = std::stoi(next());
    } else if (arg == "--warmup") {
      o.warmup = std::stoi(next());
    } else if (arg == "--steps") {
      o.steps = std::stoi(next());
    } else if (arg == "--threads") {
      o.threads = std::stoi(next());
    } else if (arg == "--models") {
      o.models = parse_models(next());
    } else if (arg == "--small-bucket-mb") {
      o.small_bucket_mb = std::stod(next());
    } else if (arg == "--bucket-mb") {
      o.default_bucket_mb = std::stod(next());
    } else if (arg == "--dist-timeout") {
      o.timeout_s = std::stod(next());
    } else if (arg == "--no-baseline") {
      o.skip_none = true;
    } else {
      throw std::invalid_argument("unknown option " + arg + "\n" + usage);
    }
  }
  if (o.batch < 1 || o.warmup < 0 || o.steps < 1 || o.threads < 0 || !(o.small_bucket_mb > 0) ||
      !(o.default_bucket_mb > 0) || !(o.timeout_s > 0)) {
    throw std::invalid_argument("--batch, --steps, the bucket sizes and --dist-timeout must be positive, "
                                "--warmup and --threads >= 0");
  }
  return std::nullopt;
}

struct Result {
  std::string config;
  double step_ms = 0;        // the slowest rank's median step
  double images_per_s = 0;   // all ranks' images / the slowest rank's timed wall time
  double reduce_s = 0;       // per step, mean over the ranks
  double exposed_s = 0;      // per step, mean over the ranks
  double hidden = 0;         // 1 - exposed / reduce
  double bytes = 0;          // per step, per rank
  std::size_t buckets = 0;
  bool synced = false;
};

// One configuration: a fresh model, trainer and (unless bucket_mb is empty) gradient sync.
Result run_config(dist::Communicator& comm, nn::Backend& backend, const ModelSpec& spec, const Options& o,
                  std::optional<double> bucket_mb) {
  constexpr int classes = 10;
  auto model = nn::make_model(spec.name, {.classes = classes, .seed = 1});
  std::unique_ptr<dist::GradientSync> sync;
  if (bucket_mb) {
    sync = std::make_unique<dist::GradientSync>(
        *model, backend, dist::host_transport(comm.split()),
        dist::GradientSyncOptions{.bucket_bytes = static_cast<std::size_t>(*bucket_mb * 1024 * 1024)});
  }
  nn::Trainer trainer(*model, backend,
                      {.sgd = {.momentum = 0.9f, .weight_decay = 5e-4f},
                       .schedule = {.kind = nn::LrScheduleKind::constant, .base_lr = 0.01f},
                       .gradient_sync = sync.get()});

  // Random images and labels, a stream of their own per rank.
  nn::Tensor images({o.batch, 3, spec.size, spec.size});
  nn::Tensor labels({o.batch}, nn::DType::i32);
  std::mt19937 rng(1234u + static_cast<unsigned>(comm.rank()));
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  for (float& v : images.f32()) v = pixel(rng);
  std::uniform_int_distribution<std::int32_t> label(0, classes - 1);
  std::int32_t* l = labels.data_as<std::int32_t>();
  for (int i = 0; i < o.batch; ++i) l[i] = label(rng);

  for (int i = 0; i < o.warmup; ++i) trainer.train_batch(images, labels).read();
  comm.barrier();
  const dist::TransportStats before = sync ? sync->stats() : dist::TransportStats{};
  std::vector<double> step_ms;
  const auto start = Clock::now();
  for (int i = 0; i < o.steps; ++i) {
    const auto t = Clock::now();
    trainer.train_batch(images, labels).read();
    step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  const dist::TransportStats after = sync ? sync->stats() : dist::TransportStats{};

  // The slowest rank's wall time and median; the transport's figures averaged over the ranks.
  std::array<double, 2> slowest{wall, bench::median(step_ms)};
  comm.all_reduce(slowest, dist::ReduceOp::max);
  std::array<double, 3> sums{after.reduce_seconds - before.reduce_seconds,
                             after.exposed_seconds - before.exposed_seconds,
                             static_cast<double>(after.bytes - before.bytes)};
  comm.all_reduce(sums, dist::ReduceOp::sum);
  const double world = comm.world();
  const double steps = o.steps;

  Result r;
  r.synced = bucket_mb.has_value();
  if (bucket_mb) {
    char name[64];
    std::snprintf(name, sizeof name, "sync %g MiB", *bucket_mb);
    r.config = name;
  } else {
    r.config = "none";
  }
  r.step_ms = slowest[1];
  r.images_per_s = world * o.batch * steps / slowest[0];
  r.reduce_s = sums[0] / world / steps;
  r.exposed_s = sums[1] / world / steps;
  r.hidden = r.reduce_s > 0 ? std::max(0.0, 1.0 - r.exposed_s / r.reduce_s) : 0;
  r.bytes = sums[2] / world / steps;
  r.buckets = sync ? sync->buckets() : 0;
  return r;
}

int run(dist::Communicator& comm, const Options& o) {
  std::optional<tbb::global_control> threads;
  if (o.threads > 0) {
    threads.emplace(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(o.threads));
  }
  const auto backend = nn::make_backend(nn::Device::cpu());
  const bool speak = comm.rank() == 0;
  if (speak) {
    std::printf("bench allreduce: %s; %s; %d oneTBB thread(s) per rank; batch %d per rank, %d warmup + %d timed "
                "steps\n",
                comm.describe().c_str(), backend->describe().c_str(), o.threads, o.batch, o.warmup, o.steps);
    std::printf("%-10s %5s %-12s %9s %10s %13s %13s %7s %10s %7s\n", "model", "size", "config", "step_ms",
                "images/s", "reduce_ms/st", "exposed_ms/st", "hidden", "MiB/step", "buckets");
    std::fflush(stdout);
  }
  std::vector<std::pair<std::string, Result>> results;
  for (const ModelSpec& spec : o.models) {
    std::vector<std::optional<double>> configs;
    if (!o.skip_none) configs.emplace_back(std::nullopt);
    configs.emplace_back(o.default_bucket_mb);
    configs.emplace_back(o.small_bucket_mb);
    for (const std::optional<double>& bucket : configs) {
      const Result r = run_config(comm, *backend, spec, o, bucket);
      if (speak) {
        if (r.synced) {
          std::printf("%-10s %5d %-12s %9.1f %10.1f %13.2f %13.2f %6.0f%% %10.2f %7zu\n", spec.name.c_str(), spec.size,
                      r.config.c_str(), r.step_ms, r.images_per_s, 1000 * r.reduce_s, 1000 * r.exposed_s, 100 * r.hidden,
                      r.bytes / (1024.0 * 1024.0), r.buckets);
        } else {
          std::printf("%-10s %5d %-12s %9.1f %10.1f %13s %13s %7s %10s %7s\n", spec.name.c_str(), spec.size,
                      r.config.c_str(), r.step_ms, r.images_per_s, "-", "-", "-", "-", "-");
        }
        std::fflush(stdout);
      }
      results.emplace_back(spec.name, r);
    }
  }
  // One line per configuration for scripts: "result <model> <config-with-underscores> <images/s> <step ms>".
  if (speak) {
    for (const auto& [name, r] : results) {
      std::string config = r.config;
      std::replace(config.begin(), config.end(), ' ', '_');
      std::printf("result %s %s world=%d images_per_s=%.2f step_ms=%.2f reduce_s=%.5f exposed_s=%.5f hidden=%.3f\n",
                  name.c_str(), config.c_str(), comm.world(), r.images_per_s, r.step_ms, r.reduce_s, r.exposed_s,
                  r.hidden);
    }
  }
  comm.barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    if (auto code = parse(argc, argv, o)) return *code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoke_bench_allreduce: %s\n", e.what());
    return 2;
  }
  std::unique_ptr<dist::Communicator> comm;
  try {
    comm = dist::connect({.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.timeout_s * 1000))});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoke_bench_allreduce: %s\n", e.what());
    return 1;
  }
  try {
    return run(*comm, o);
  } catch (const std::exception& e) {
    if (comm->world() == 1) {
      std::fprintf(stderr, "stoke_bench_allreduce: %s\n", e.what());
      return 1;
    }
    comm->abort("stoke_bench_allreduce: rank " + std::to_string(comm->rank()) + " of " +
                std::to_string(comm->world()) + ": " + e.what());
  }
}
