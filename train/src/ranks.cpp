#include "stoke/train/ranks.hpp"

#include <exception>

#include "stoke/train/data_parallel.hpp"

namespace stoke::train {

Ranks::Ranks(std::chrono::milliseconds timeout)
    : comm_(dist::connect({.timeout = timeout})), rank_(comm_->rank()), world_(comm_->world()) {}

Ranks::~Ranks() = default;

void Ranks::barrier() { comm_->barrier(); }

int Ranks::guard(std::string_view who, const std::function<int()>& body) {
  if (world_ == 1) return body();
  try {
    return body();
  } catch (const std::exception& error) {
    comm_->abort(std::string(who) + ": rank " + std::to_string(rank_) + " of " + std::to_string(world_) + ": " +
                 error.what());
  }
  return 1;  // not reached: abort() ends every rank
}

std::string rank_device(const std::string& device, const Ranks& ranks) {
  return rank_device(device, ranks.communicator());
}

}  // namespace stoke::train
