// A stand-in for libnccl.so.2 with one rank (world 1), so that nccl_test can run stoke's NCCL code
// on machines without NCCL (it loads this file through STOKE_NCCL_LIBRARY). It needs no CUDA:
// - ncclGetUniqueId gives fixed bytes, and ncclCommInitRank accepts only those, rank 0 of 1;
//   otherwise it returns ncclInvalidArgument or ncclInvalidUsage, whose texts say "fake NCCL".
// - A sum over one rank is its input: an in-place all-reduce or broadcast (all stoke makes)
//   touches no memory, so they are also safe on real device pointers. Others copy, on the host.
//
// Test-only extensions (resolved with dlsym), for the simulated CUDA runtime whose device memory is
// host memory: fake_nccl_set_sum_factor(f) makes an all-reduce multiply by f (as if f ranks held
// the same values), run through the hook given to fake_nccl_set_enqueue (in the stream's order)
// when there is one, at once otherwise; fake_nccl_set_async_error(e) makes ncclCommGetAsyncError
// report e; the counters say what was called.
#include <atomic>
#include <cstddef>
#include <cstring>

namespace {

constexpr int success = 0;
constexpr int invalid_argument = 4;
constexpr int invalid_usage = 5;
constexpr int remote_error = 6;
constexpr int float32 = 7;
constexpr int sum = 0;

struct UniqueId {
  char internal[128];
};

struct Comm {
  int rank;
  int world;
};

constexpr char id_text[] = "stoke fake NCCL unique id";

UniqueId the_id() {
  UniqueId id{};
  std::memcpy(id.internal, id_text, sizeof id_text);
  for (std::size_t i = sizeof id_text; i < sizeof id.internal; ++i) id.internal[i] = static_cast<char>(i);
  return id;
}

using EnqueueHook = int (*)(void* stream, void (*work)(void*), void* argument);

std::atomic<float> sum_factor{1.0f};
std::atomic<EnqueueHook> enqueue_hook{nullptr};
std::atomic<int> async_error{success};
std::atomic<int> all_reduces{0};
std::atomic<std::size_t> last_count{0};
std::atomic<int> live_comms{0};
std::atomic<int> aborts{0};

struct Scale {
  float* data;
  std::size_t count;
  float factor;
};

void scale(void* argument) {
  const auto* work = static_cast<Scale*>(argument);
  for (std::size_t i = 0; i < work->count; ++i) work->data[i] *= work->factor;
  delete work;
}

}  // namespace

#define FAKE_NCCL_API extern "C" __attribute__((visibility("default")))

FAKE_NCCL_API int ncclGetVersion(int* version) {
  if (version == nullptr) return invalid_argument;
  *version = 22105;  // 2.21.5
  return success;
}

FAKE_NCCL_API int ncclGetUniqueId(UniqueId* id) {
  if (id == nullptr) return invalid_argument;
  *id = the_id();
  return success;
}

FAKE_NCCL_API int ncclCommInitRank(Comm** comm, int world, UniqueId id, int rank) {
  if (comm == nullptr || std::memcmp(id.internal, the_id().internal, sizeof id.internal) != 0) return invalid_argument;
  if (world != 1 || rank != 0) return invalid_usage;
  *comm = new Comm{rank, world};
  ++live_comms;
  return success;
}

FAKE_NCCL_API int ncclCommDestroy(Comm* comm) {
  if (comm == nullptr) return invalid_argument;
  delete comm;
  --live_comms;
  return success;
}

FAKE_NCCL_API int ncclCommAbort(Comm* comm) {
  ++aborts;
  return ncclCommDestroy(comm);
}

FAKE_NCCL_API int ncclCommGetAsyncError(Comm* comm, int* error) {
  if (comm == nullptr || error == nullptr) return invalid_argument;
  *error = async_error.load();
  return success;
}

FAKE_NCCL_API const char* ncclGetErrorString(int result) {
  switch (result) {
    case success:
      return "no error";
    case invalid_argument:
      return "invalid argument (fake NCCL: not its unique id, or a null pointer)";
    case invalid_usage:
      return "invalid usage (fake NCCL: it has only rank 0 of a world of 1)";
    case remote_error:
      return "remote process exited or there was a network error (fake NCCL)";
    default:
      return "unknown result (fake NCCL)";
  }
}

FAKE_NCCL_API int ncclAllReduce(const void* send, void* receive, std::size_t count, int type, int op, Comm* comm,
                                void* stream) {
  if (comm == nullptr || type != float32 || op != sum || (count > 0 && (send == nullptr || receive == nullptr)))
    return invalid_argument;
  ++all_reduces;
  last_count = count;
  if (send != receive) std::memmove(receive, send, count * sizeof(float));
  const float factor = sum_factor.load();
  if (factor == 1.0f || count == 0) return success;
  auto* work = new Scale{static_cast<float*>(receive), count, factor};
  if (const EnqueueHook hook = enqueue_hook.load()) {
    if (hook(stream, scale, work) != 0) {
      delete work;
      return invalid_argument;
    }
  } else {
    scale(work);
  }
  return success;
}

FAKE_NCCL_API int ncclBroadcast(const void* send, void* receive, std::size_t count, int /*type*/, int root, Comm* comm,
                                void* /*stream*/) {
  if (comm == nullptr || root != 0) return invalid_argument;
  if (send != receive) std::memmove(receive, send, count);  // bytes: stoke broadcasts ncclUint8
  return success;
}

// ---- test-only extensions

FAKE_NCCL_API void fake_nccl_set_sum_factor(float factor) { sum_factor = factor; }
FAKE_NCCL_API void fake_nccl_set_enqueue(EnqueueHook hook) { enqueue_hook = hook; }
FAKE_NCCL_API void fake_nccl_set_async_error(int error) { async_error = error; }
FAKE_NCCL_API int fake_nccl_all_reduces() { return all_reduces.load(); }
FAKE_NCCL_API std::size_t fake_nccl_last_count() { return last_count.load(); }
FAKE_NCCL_API int fake_nccl_live_comms() { return live_comms.load(); }
FAKE_NCCL_API int fake_nccl_aborts() { return aborts.load(); }
