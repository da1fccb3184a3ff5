// `stoke bench <what>`: benchmarks, one per source file, dispatched by name.
#include <array>

#include "cli.hpp"
#include "commands.hpp"

namespace stoke::app {

int bench(int argc, char** argv) {
  static constexpr std::array benchmarks{
      Subcommand{"graph", "throughput and per-item overhead of the graph executor on synthetic stages", bench_graph},
      Subcommand{"pipeline", "images/s of the CPU input pipeline (read, decode, augment, batch) on a dataset",
                 bench_pipeline},
      Subcommand{"device",
                 "host-to-device bandwidth and the overlap of copies with a synthetic compute kernel (GPU or CPU)",
                 bench_device},
      Subcommand{"autotune",
                 "the scheduler from a bad start vs the best static setting, feeding a simulated accelerator",
                 bench_autotune},
      Subcommand{"nn", "training images/s of a built-in model on synthetic data already on the device (CPU or GPU)",
                 bench_nn},
      Subcommand{"train",
                 "the whole pipeline's training images/s as a share of the compute bound (synthetic batches on the "
                 "device)",
                 bench_train},
  };
  return dispatch("bench", "Measure the throughput of stoke's parts.", benchmarks, argc, argv);
}

}  // namespace stoke::app
