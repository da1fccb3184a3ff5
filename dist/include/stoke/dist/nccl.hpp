// NCCL: the GPU collectives of a data-parallel run -- sums and broadcasts of device memory between
// the ranks' GPUs, enqueued on CUDA streams -- and the gradient transport built on them.
//
//   auto comm = dist::connect();                                      // MPI under mpirun, else alone
//   const gpu::Device device = gpu::Device::cuda(comm->local_rank());
//   dist::NcclCommunicator nccl(*comm, device);                       // collective: every rank
//   dist::GradientSync sync(model, backend, dist::nccl_transport(nccl, backend));
//
// NCCL is loaded at run time (dlopen), not linked: stoke builds and runs without it, and only a
// NcclCommunicator needs it. The library is libnccl.so.2 from the library path, or the file
// STOKE_NCCL_LIBRARY names. On the GPU machines it comes with PyTorch's wheels, in the Python
// site-packages' nvidia/nccl/lib, which scripts/run-on-device.sh puts on LD_LIBRARY_PATH.
//
// This header declares no NCCL or CUDA type of its own beyond the opaque handle.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/error.hpp>
#include <stoke/gpu/stream.hpp>
#include <stoke/nn/backend.hpp>
#include <string>

#include "stoke/dist/communicator.hpp"
#include "stoke/dist/gradient_sync.hpp"

// NCCL's opaque communicator (ncclComm_t is ncclComm*), declared here so that this header does
// not need nccl.h.
struct ncclComm;

namespace stoke::dist {

namespace detail {
struct NcclLibrary;
}

/// A failed NCCL call: "dist/src/nccl.cpp:120: ncclAllReduce(...) failed: ncclInvalidUsage (invalid
/// usage (run with NCCL_DEBUG=WARN for details))"; library() is "NCCL", code() the ncclResult_t.
class NcclError : public gpu::GpuCallError {
 public:
  using gpu::GpuCallError::GpuCallError;
};

/// Whether NCCL can be loaded (every entry point stoke uses found); when not, `why` (if given)
/// gets the reason, naming the library, STOKE_NCCL_LIBRARY and where NCCL is usually found.
bool nccl_available(std::string* why = nullptr);

/// The loaded NCCL's version, "2.21.5". Throws std::runtime_error (the reason nccl_available()
/// gives) when NCCL cannot be loaded.
std::string nccl_version();

/// NCCL's ncclUniqueId: the 128 bytes rank 0 makes and every rank needs to join the communicator.
struct NcclUniqueId {
  std::array<std::byte, 128> bytes{};
  friend bool operator==(const NcclUniqueId&, const NcclUniqueId&) = default;
};

/// The name of the file a file rendezvous writes in its folder.
inline constexpr const char* nccl_unique_id_file = "nccl-unique-id";

/// Exchanges the unique id through a folder every rank can read (a shared file system), for ranks
/// started without MPI. Rank 0 makes the id (ncclGetUniqueId; the folder is created if needed) and
/// writes it to `<folder>/nccl-unique-id` at once (a temporary file renamed into place, so the
/// file is never seen half-written); the other ranks wait for that file, up to `timeout`, and
/// throw std::runtime_error naming it when it did not appear (or never held 128 bytes). The
/// folder must be this run's own: an id left by an earlier run would be read by a rank that looks
/// before rank 0 writes.
NcclUniqueId rendezvous_unique_id(const std::filesystem::path& folder, int rank,
                                  std::chrono::milliseconds timeout = std::chrono::minutes(5));

/// One rank's member of an NCCL communicator: a set of GPUs, one per rank, that sum and broadcast
/// device memory between them. Made collectively (every rank constructs one at the same point),
/// used by one thread at a time; the destructor destroys the communicator, or aborts it when it
/// had failed. Not copyable or movable (transports refer to it).
///
/// Every constructor throws gpu::DeviceError when `device` is not a CUDA device or this stoke was
/// built without CUDA, std::runtime_error when NCCL cannot be loaded, NcclError when NCCL refuses.
class NcclCommunicator {
 public:
  /// The ranks of `comm`, on `device` (usually cuda:<comm.local_rank()>): rank 0 makes the unique
  /// id and broadcasts it over `comm`.
  NcclCommunicator(Communicator& comm, gpu::Device device);
  /// Rank `rank` of `world`, the id exchanged through `folder` (see rendezvous_unique_id).
  NcclCommunicator(const std::filesystem::path& folder, int rank, int world, gpu::Device device,
                   std::chrono::milliseconds timeout = std::chrono::minutes(5));
  /// Rank `rank` of `world`, from an id every rank already has.
  NcclCommunicator(const NcclUniqueId& id, int rank, int world, gpu::Device device);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const noexcept { return rank_; }
  int world() const noexcept { return world_; }
  gpu::Device device() const noexcept { return device_; }
  /// "nccl 2.21.5, rank 1 of 2 on cuda:1".
  std::string describe() const;

  /// Sums `count` floats at device pointer `data` over the ranks, in place: enqueued on `stream`
  /// (a stream of device()), it returns at once.
  void all_reduce_sum(float* data, std::size_t count, gpu::StreamView stream);
  /// Copies `bytes` at device pointer `data` of rank `root` to every rank's `data`, enqueued on
  /// `stream` (a stream of device()).
  void broadcast(void* data, std::size_t bytes, int root, gpu::StreamView stream);
  /// Throws NcclError naming the error when the communicator has failed since it was made (a peer
  /// died, a network error: ncclCommGetAsyncError); the communicator is then unusable.
  void check();

 private:
  void init(const NcclUniqueId& id);
  void require_stream(gpu::StreamView stream, const char* what) const;

  const detail::NcclLibrary* nccl_ = nullptr;
  ncclComm* comm_ = nullptr;
  int rank_ = 0;
  int world_ = 1;
  gpu::Device device_;
  bool failed_ = false;  // check() saw an asynchronous error: abort, not destroy
};

/// Sums GradientSync's buckets of gradients on a CUDA device with NCCL, without host waits: each
/// bucket is packed into one device buffer of its own (made once, reused every sync), summed in
/// place and unpacked, on a stream of the transport's that waits for the compute stream's work;
/// finish() makes the compute stream wait for the transport's. `nccl` must outlive the transport.
/// Throws std::invalid_argument when the backend is not on nccl's device.
std::unique_ptr<BucketTransport> nccl_transport(NcclCommunicator& nccl, nn::Backend& backend);
/// The same for gradients computed on `compute` (a stream of nccl's device, which must outlive the
/// transport).
std::unique_ptr<BucketTransport> nccl_transport(NcclCommunicator& nccl, gpu::StreamView compute);

}  // namespace stoke::dist
