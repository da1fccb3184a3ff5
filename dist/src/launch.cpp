#include "stoke/dist/launch.hpp"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace stoke::dist {

namespace {

std::optional<int> number(const char* variable) {
  const char* text = std::getenv(variable);
  if (text == nullptr || *text == '\0') return std::nullopt;
  const std::string_view s(text);
  int value = 0;
  const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (error != std::errc{} || end != s.data() + s.size() || value < 0) {
    throw std::runtime_error(std::string("the launcher's variable ") + variable + " is '" + text +
                             "', not a rank or a count (unset it when not launching with mpirun or srun)");
  }
  return value;
}

// The first of a launcher's (rank, size, local rank, local size) variables that is set.
struct Names {
  const char* launcher;
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;
};

constexpr Names kLaunchers[] = {
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"pmi", "PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE"},
};

}  // namespace

Launch detect_launch() {
  for (const Names& names : kLaunchers) {
    const std::optional<int> rank = number(names.rank);
    if (!rank) continue;
    Launch launch;
    launch.launcher = names.launcher;
    launch.rank = *rank;
    launch.world = number(names.world).value_or(1);
    launch.local_rank = number(names.local_rank).value_or(0);
    launch.local_world = number(names.local_world).value_or(1);
    if (launch.world < 1 || launch.rank >= launch.world) {
      throw std::runtime_error(std::string("the launcher's variables say rank ") + std::to_string(launch.rank) +
                               " of " + std::to_string(launch.world) + " (" + names.rank + ", " + names.world +
                               "): the rank must be below the world size");
    }
    // MPI counts the ranks sharing the node itself (MPI_COMM_TYPE_SHARED); these are a first guess.
    if (launch.local_rank >= launch.local_world) launch.local_world = launch.local_rank + 1;
    return launch;
  }
  return {};
}

}  // namespace stoke::dist
