#include "stoke/dist/replicas.hpp"

#include <cstring>
#include <functional>
#include <stdexcept>
#include <vector>

namespace stoke::dist {

namespace {

// Every tensor of the training state, in the same order on every rank.
void for_each_state_tensor(nn::Layer& model, nn::Optimizer* optimizer, const std::function<void(nn::Tensor&)>& visit,
                           bool buffers = true) {
  model.for_each_parameter([&](const std::string&, nn::Parameter& p) { visit(p.value); });
  if (buffers) model.for_each_buffer([&](const std::string&, nn::Tensor& t) { visit(t); });
  if (optimizer != nullptr) optimizer->for_each_state([&](const std::string&, nn::Tensor& t) { visit(t); });
}

// t's bytes on the host (t itself on the CPU).
nn::Tensor on_host(const nn::Tensor& t, nn::StreamView stream) {
  if (t.device().is_cpu()) return t;
  nn::Tensor host = t.to(nn::Device::cpu(), stream);
  stream.synchronize();
  return host;
}

std::uint64_t fnv1a(const void* data, std::size_t bytes, std::uint64_t hash) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 0x100000001b3ULL;
  return hash;
}

}  // namespace

void broadcast_state(Communicator& comm, nn::Layer& model, nn::Optimizer* optimizer, nn::StreamView stream, int root) {
  if (comm.world() == 1) return;
  for_each_state_tensor(model, optimizer, [&](nn::Tensor& t) {
    if (!t.defined()) return;
    nn::Tensor host = on_host(t, stream);
    comm.broadcast(std::span<std::byte>(static_cast<std::byte*>(host.data()), host.bytes()), root);
    if (!t.device().is_cpu()) {
      t.copy_from(host, stream);
      stream.synchronize();  // `host` goes away next
    }
  });
}

std::uint64_t state_checksum(nn::Layer& model, nn::Optimizer* optimizer, nn::StreamView stream, bool buffers) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for_each_state_tensor(
      model, optimizer,
      [&](nn::Tensor& t) {
        if (!t.defined()) return;
        const nn::Tensor host = on_host(t, stream);
        hash = fnv1a(host.data(), host.bytes(), hash);
      },
      buffers);
  return hash;
}

void check_replicas(Communicator& comm, nn::Layer& model, nn::Optimizer* optimizer, nn::StreamView stream,
                    const std::string& when, bool buffers) {
  if (comm.world() == 1) return;
  const std::uint64_t mine = state_checksum(model, optimizer, stream, buffers);
  const std::vector<std::byte> all =
      comm.all_gather(std::span<const std::byte>(reinterpret_cast<const std::byte*>(&mine), sizeof mine));
  std::vector<std::uint64_t> sums(static_cast<std::size_t>(comm.world()));
  std::memcpy(sums.data(), all.data(), all.size());
  std::string differ;
  for (std::size_t r = 1; r < sums.size(); ++r) {
    if (sums[r] != sums[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!differ.empty()) {
    throw std::runtime_error("rank " + std::to_string(comm.rank()) + ": at " + when +
                             " the training state of rank(s) " + differ +
                             " differs from rank 0's (checksums compared): the replicas drifted apart "
                             "(a nondeterministic kernel, or ranks that resumed from different checkpoints)");
  }
}

}  // namespace stoke::dist
