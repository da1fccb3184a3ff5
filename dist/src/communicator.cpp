#include "stoke/dist/communicator.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#if STOKE_HAS_MPI
#include "mpi_communicator.hpp"
#endif

namespace stoke::dist {

namespace {

// One process: every collective's result is its input.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const noexcept override { return 0; }
  int world() const noexcept override { return 1; }
  int local_rank() const noexcept override { return 0; }
  int local_world() const noexcept override { return 1; }
  std::string describe() const override { return "local (1 process)"; }
  void all_reduce(std::span<float>, ReduceOp) override {}
  void all_reduce(std::span<double>, ReduceOp) override {}
  void all_reduce(std::span<std::int64_t>, ReduceOp) override {}
  void broadcast(std::span<std::byte>, int root) override { check_root(root); }
  std::vector<std::byte> all_gather(std::span<const std::byte> bytes) override { return {bytes.begin(), bytes.end()}; }
  void barrier() override {}
  std::unique_ptr<Communicator> split() override { return std::make_unique<LocalCommunicator>(); }
  [[noreturn]] void abort(const std::string& message, int code) override {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    std::_Exit(code);
  }
  void set_timeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }
  std::chrono::milliseconds timeout() const noexcept override { return timeout_; }

 private:
  static void check_root(int root) {
    if (root != 0) throw std::invalid_argument("broadcast from rank " + std::to_string(root) + " in a world of 1");
  }
  std::chrono::milliseconds timeout_{std::chrono::minutes(5)};
};

}  // namespace

std::unique_ptr<Communicator> make_local_communicator() { return std::make_unique<LocalCommunicator>(); }

bool have_mpi() noexcept { return STOKE_HAS_MPI != 0; }

std::unique_ptr<Communicator> connect(const ConnectOptions& options) {
  const Launch launch = detect_launch();
  if (!launch.launched()) {
    auto local = make_local_communicator();
    local->set_timeout(options.timeout);
    return local;
  }
#if STOKE_HAS_MPI
  return detail::make_mpi_communicator(options);
#else
  throw std::runtime_error("this process was started by a launcher (" + launch.launcher + ", rank " +
                           std::to_string(launch.rank) + " of " + std::to_string(launch.world) +
                           ") but this stoke was built without MPI: install Open MPI (Debian: libopenmpi-dev "
                           "openmpi-bin; scripts/install-deps.sh does) and rebuild, or run without mpirun");
#endif
}

}  // namespace stoke::dist
