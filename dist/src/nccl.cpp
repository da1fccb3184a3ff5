// NCCL loaded at run time, the unique id's rendezvous and NcclCommunicator (nccl.hpp). Needs no
// CUDA header: NCCL's stream argument is a cudaStream_t, which StreamView::native() is, and the
// device is made current with gpu::DeviceGuard. A build without CUDA compiles the same code, and
// NcclCommunicator's constructors throw there before NCCL is touched.
#include "stoke/dist/nccl.hpp"


#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "stoke/gpu/runtime_library.hpp"
#include "stoke/base/atomic_file.hpp"

namespace stoke::dist {

namespace {

// The few NCCL declarations stoke needs, as nccl.h declares them (NCCL 2's C ABI is stable).
using ncclResult_t = int;  // a C enum
constexpr ncclResult_t ncclSuccess = 0;
constexpr ncclResult_t ncclInProgress = 7;
using ncclDataType_t = int;
constexpr ncclDataType_t ncclUint8 = 1;
constexpr ncclDataType_t ncclFloat32 = 7;
using ncclRedOp_t = int;
constexpr ncclRedOp_t ncclSum = 0;
using ncclComm_t = ncclComm*;
struct ncclUniqueId {
  char internal[128];
};
static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueId::bytes));
using cudaStream_t = CUstream_st*;

// ncclResult_t's names, for messages (ncclGetErrorString gives only the text).
std::string result_name(ncclResult_t result) {
  constexpr const char* names[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                   "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                   "ncclRemoteError",   "ncclInProgress"};
  if (result >= 0 && result < static_cast<int>(std::size(names))) return names[result];
  return "ncclResult " + std::to_string(result);
}

}  // namespace

// NCCL's entry points in one loaded library, or why it could not be loaded. The members are named
// after the functions, so that a check's message names the NCCL call.
struct detail::NcclLibrary : gpu::RuntimeLibrary {
  ncclResult_t (*ncclGetVersion)(int*) = nullptr;
  ncclResult_t (*ncclGetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*ncclCommInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*ncclCommDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*ncclCommAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  const char* (*ncclGetErrorString)(ncclResult_t) = nullptr;
  ncclResult_t (*ncclAllReduce)(const void*, void*, std::size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t) = nullptr;
  ncclResult_t (*ncclBroadcast)(const void*, void*, std::size_t, ncclDataType_t, int, ncclComm_t,
                                cudaStream_t) = nullptr;

  bool resolve_all(std::string& missing) {
    return resolve("ncclGetVersion", ncclGetVersion, missing) && resolve("ncclGetUniqueId", ncclGetUniqueId, missing) &&
           resolve("ncclCommInitRank", ncclCommInitRank, missing) &&
           resolve("ncclCommDestroy", ncclCommDestroy, missing) && resolve("ncclCommAbort", ncclCommAbort, missing) &&
           resolve("ncclCommGetAsyncError", ncclCommGetAsyncError, missing) &&
           resolve("ncclGetErrorString", ncclGetErrorString, missing) &&
           resolve("ncclAllReduce", ncclAllReduce, missing) && resolve("ncclBroadcast", ncclBroadcast, missing);
  }

  NcclError failure(ncclResult_t result, const char* call, const char* file, int line, std::string context = {}) const {
    const char* text = ncclGetErrorString(result);
    return NcclError("NCCL", result, result_name(result), text ? text : "", call, file, line, std::move(context));
  }
};

namespace {

using detail::NcclLibrary;

// Throws NcclError unless `call` (a NcclLibrary member's name and its arguments) returns ncclSuccess;
// `context` (a string, evaluated only on failure) leads the message.
#define STOKE_NCCL_CHECK(nccl, context, function, ...)                                                      \
  do {                                                                                                      \
    const ncclResult_t stoke_nccl_result_ = (nccl).function(__VA_ARGS__);                                   \
    if (stoke_nccl_result_ != ncclSuccess)                                                                  \
      throw(nccl).failure(stoke_nccl_result_, #function "(" #__VA_ARGS__ ")", __FILE__, __LINE__, context); \
  } while (false)

// The library named by STOKE_NCCL_LIBRARY, or libnccl.so.2: loaded on first use, then shared.
const NcclLibrary& nccl_library() {
  static constexpr gpu::RuntimeLibrarySpec spec{
      .variable = "STOKE_NCCL_LIBRARY",
      .default_name = "libnccl.so.2",
      .what = "NCCL",
      .named_hint =
          "point it at NCCL's libnccl.so.2 (on the GPU machines in the Python site-packages' "
          "nvidia/nccl/lib), or unset it to look for that on the library path",
      .default_hint =
          "stoke does not ship NCCL: on the GPU machines it is in the Python site-packages' "
          "nvidia/nccl/lib (PyTorch's nvidia-nccl wheel), which must be on LD_LIBRARY_PATH "
          "(scripts/run-on-device.sh puts it there); or set STOKE_NCCL_LIBRARY to the library's path",
      .unusable_hint = "is it NCCL 2's libnccl.so.2?",
  };
  return gpu::load_runtime_library<NcclLibrary>(spec);
}

// The loaded library; std::runtime_error saying why when there is none.
const NcclLibrary& require_nccl() {
  const NcclLibrary& library = nccl_library();
  if (!library.error().empty()) throw std::runtime_error(library.error());
  return library;
}

std::string version_of(const NcclLibrary& nccl) {
  int code = 0;
  STOKE_NCCL_CHECK(nccl, std::string(), ncclGetVersion, &code);
  // NCCL_VERSION_CODE: major * 1000 + minor * 100 + patch up to 2.8, major * 10000 + ... since 2.9.
  const bool wide = code >= 10000;
  const int major = wide ? code / 10000 : code / 1000;
  const int minor = wide ? code % 10000 / 100 : code % 1000 / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

NcclUniqueId make_unique_id(const NcclLibrary& nccl) {
  ncclUniqueId raw{};
  STOKE_NCCL_CHECK(nccl, std::string("rank 0 making the communicator's unique id"), ncclGetUniqueId, &raw);
  NcclUniqueId id;
  std::memcpy(id.bytes.data(), raw.internal, sizeof raw.internal);
  return id;
}

// ---- the file rendezvous

// The id in `file` when it holds exactly one; `size` gets the file's size (-1: no file).
std::optional<NcclUniqueId> read_unique_id(const std::filesystem::path& file, std::intmax_t& size) {
  std::error_code error;
  const auto bytes = std::filesystem::file_size(file, error);
  size = error ? -1 : static_cast<std::intmax_t>(bytes);
  if (size != static_cast<std::intmax_t>(sizeof(NcclUniqueId::bytes))) return std::nullopt;
  std::ifstream in(file, std::ios::binary);
  NcclUniqueId id;
  in.read(reinterpret_cast<char*>(id.bytes.data()), static_cast<std::streamsize>(id.bytes.size()));
  if (in.gcount() != static_cast<std::streamsize>(id.bytes.size())) return std::nullopt;
  return id;
}

void write_unique_id(const std::filesystem::path& file, const NcclUniqueId& id) {
  // A reader sees no file or the whole id.
  base::write_file_atomically(file, std::as_bytes(std::span(id.bytes)), "NCCL unique id");
}

std::string milliseconds(std::chrono::milliseconds duration) { return std::to_string(duration.count()) + " ms"; }

}  // namespace

bool nccl_available(std::string* why) {
  const NcclLibrary& library = nccl_library();
  if (why != nullptr) *why = library.error();
  return library.error().empty();
}

std::string nccl_version() { return version_of(require_nccl()); }

NcclUniqueId rendezvous_unique_id(const std::filesystem::path& folder, int rank, std::chrono::milliseconds timeout) {
  if (rank < 0) throw std::invalid_argument("rendezvous_unique_id: rank " + std::to_string(rank) + " is negative");
  const std::filesystem::path file = folder / nccl_unique_id_file;
  if (rank == 0) {
    const NcclUniqueId id = make_unique_id(require_nccl());
    std::error_code error;
    std::filesystem::create_directories(folder, error);
    if (error)
      throw std::runtime_error("could not create the rendezvous folder " + folder.string() + ": " + error.message());
    write_unique_id(file, id);
    return id;
  }

  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  std::chrono::milliseconds pause{1};
  std::intmax_t size = -1;
  for (;;) {
    if (std::optional<NcclUniqueId> id = read_unique_id(file, size)) return *id;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
  const std::string found = size < 0 ? "no NCCL unique id appeared as " + file.string()
                                     : file.string() + " held " + std::to_string(size) + " bytes, not the " +
                                           std::to_string(sizeof(NcclUniqueId::bytes)) + " of an NCCL unique id,";
  throw std::runtime_error("rank " + std::to_string(rank) + ": " + found + " within " + milliseconds(timeout) +
                           ": rank 0 writes it there when it starts; is it running, with the same folder, on a "
                           "file system this machine shares?");
}

// ---- NcclCommunicator

namespace {

// What every constructor checks before NCCL is touched; the library.
const NcclLibrary& prepare(gpu::Device device, int rank, int world) {
  if (!gpu::built_with_cuda())
    throw gpu::DeviceError(
        "NcclCommunicator needs a CUDA device, but this stoke was built without CUDA "
        "(reconfigure with -DSTOKE_CUDA=ON); sum CPU tensors with dist::host_transport");
  if (!device.is_cuda())
    throw gpu::DeviceError("NcclCommunicator needs a CUDA device, not " + device.str() +
                           "; sum CPU tensors with dist::host_transport");
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("NcclCommunicator: rank " + std::to_string(rank) + " of a world of " +
                                std::to_string(world));
  return require_nccl();
}

}  // namespace

NcclCommunicator::NcclCommunicator(Communicator& comm, gpu::Device device)
    : nccl_(&prepare(device, comm.rank(), comm.world())), rank_(comm.rank()), world_(comm.world()), device_(device) {
  NcclUniqueId id;
  if (rank_ == 0) id = make_unique_id(*nccl_);
  comm.broadcast(id.bytes, 0);
  init(id);
}

NcclCommunicator::NcclCommunicator(const std::filesystem::path& folder, int rank, int world, gpu::Device device,
                                   std::chrono::milliseconds timeout)
    : nccl_(&prepare(device, rank, world)), rank_(rank), world_(world), device_(device) {
  init(rendezvous_unique_id(folder, rank, timeout));
}

NcclCommunicator::NcclCommunicator(const NcclUniqueId& id, int rank, int world, gpu::Device device)
    : nccl_(&prepare(device, rank, world)), rank_(rank), world_(world), device_(device) {
  init(id);
}

void NcclCommunicator::init(const NcclUniqueId& id) {
  ncclUniqueId raw{};
  std::memcpy(raw.internal, id.bytes.data(), sizeof raw.internal);
  const gpu::DeviceGuard guard(device_);  // NCCL binds the communicator to the current device
  ncclComm_t comm = nullptr;
  STOKE_NCCL_CHECK(*nccl_,
                   "rank " + std::to_string(rank_) + " of " + std::to_string(world_) + " on " + device_.str() +
                       " joining an NCCL communicator",
                   ncclCommInitRank, &comm, world_, raw, rank_);
  comm_ = comm;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  ncclResult_t state = ncclSuccess;
  if (!failed_ && nccl_->ncclCommGetAsyncError(comm_, &state) == ncclSuccess)
    failed_ = state != ncclSuccess && state != ncclInProgress;
  // A failed communicator's operations may never end: abort them rather than wait.
  const ncclResult_t result = failed_ ? nccl_->ncclCommAbort(comm_) : nccl_->ncclCommDestroy(comm_);
  if (result == ncclSuccess) return;
  try {
    const NcclError error =
        nccl_->failure(result, failed_ ? "ncclCommAbort(comm_)" : "ncclCommDestroy(comm_)", __FILE__, __LINE__);
    std::fprintf(stderr, "stoke: warning: %s; ignored during cleanup\n", error.what());
  } catch (...) {  // no memory for the message
    std::fprintf(stderr, "stoke: warning: destroying an NCCL communicator failed; ignored during cleanup\n");
  }
}

std::string NcclCommunicator::describe() const {
  return "nccl " + version_of(*nccl_) + ", rank " + std::to_string(rank_) + " of " + std::to_string(world_) + " on " +
         device_.str();
}

void NcclCommunicator::require_stream(gpu::StreamView stream, const char* what) const {
  if (stream.is_host() || stream.device() != device_)
    throw std::invalid_argument(std::string("NcclCommunicator::") + what + ": NCCL enqueues on a CUDA stream of " +
                                device_.str() + ", not on one of " + stream.device().str());
}

void NcclCommunicator::all_reduce_sum(float* data, std::size_t count, gpu::StreamView stream) {
  require_stream(stream, "all_reduce_sum");
  STOKE_NCCL_CHECK(*nccl_, std::string(), ncclAllReduce, data, data, count, ncclFloat32, ncclSum, comm_,
                   stream.native());
}

void NcclCommunicator::broadcast(void* data, std::size_t bytes, int root, gpu::StreamView stream) {
  require_stream(stream, "broadcast");
  if (root < 0 || root >= world_)
    throw std::invalid_argument("NcclCommunicator::broadcast from rank " + std::to_string(root) + " in a world of " +
                                std::to_string(world_));
  STOKE_NCCL_CHECK(*nccl_, std::string(), ncclBroadcast, data, data, bytes, ncclUint8, root, comm_, stream.native());
}

void NcclCommunicator::check() {
  ncclResult_t state = ncclSuccess;
  STOKE_NCCL_CHECK(*nccl_, std::string(), ncclCommGetAsyncError, comm_, &state);
  if (state == ncclSuccess || state == ncclInProgress) return;
  failed_ = true;
  throw nccl_->failure(state, "ncclCommGetAsyncError(comm_, &state)", __FILE__, __LINE__,
                       "the NCCL communicator of rank " + std::to_string(rank_) + " of " + std::to_string(world_) +
                           " on " + device_.str() + " failed");
}

}  // namespace stoke::dist
