// The simulated CUDA runtime (see fake_cudart.hpp for what it models). One mutex guards all of its
// state and one condition variable announces every change; stream threads run their work outside
// the lock. Handles are numbers that are never reused, so a destroyed handle is recognised as such.
#include "fake_cudart.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace stoke::gpu::sim {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int device_count = 1;
constexpr std::size_t device_memory = std::size_t{8} << 30;
constexpr int multiprocessors = 8;
constexpr int least_priority = 0;
constexpr int greatest_priority = -5;          // lower numbers are higher priorities, as on a Hopper GPU
constexpr std::size_t device_alignment = 256;  // cudaMalloc's
constexpr std::size_t page = 4096;             // cudaHostAlloc's
// Larger requests fail as out of memory without asking the host (ASan aborts above 1 TiB).
constexpr std::size_t max_host_block = std::size_t{64} << 30;

// The simulated driver's CUDA version (set_driver_version): 0 is no driver, below CUDART_VERSION
// one too old for this runtime; either way cudaGetDeviceCount fails, as the real runtime's does.
std::atomic<int> driver_version{CUDART_VERSION};

thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

/// One cudaEventRecord: complete once its stream has reached it.
struct Record {
  bool done = false;
  Clock::time_point at{};
};

struct EventState {
  int device = 0;
  unsigned flags = 0;
  std::shared_ptr<Record> latest;  // null until first recorded
};

struct StreamState {
  int device = 0;
  unsigned flags = 0;
  int priority = 0;
  std::deque<std::function<void()>> work;
  std::uint64_t enqueued = 0;
  std::uint64_t completed = 0;
  bool destroyed = false;  // cudaStreamDestroy: finish the work, then the thread ends
  bool finished = false;   // the thread has ended
  std::thread thread;
};

struct Block {
  std::size_t bytes = 0;
  bool device = false;  // cudaMalloc; else cudaHostAlloc
};

struct Runtime {
  std::mutex mutex;
  std::condition_variable changed;
  std::unordered_map<std::uintptr_t, std::shared_ptr<StreamState>> streams;
  std::vector<std::shared_ptr<StreamState>> retired;  // destroyed, their threads still to join
  std::unordered_map<std::uintptr_t, std::shared_ptr<EventState>> events;
  std::map<std::uintptr_t, Block> blocks;  // by address
  std::size_t device_bytes = 0;
  int host_allocs_left = -1;  // fail_host_alloc_after(): cudaHostAlloc calls that may still succeed
  std::uintptr_t next_handle = 0x5000;
  cudaError_t sticky = cudaSuccess;
  std::atomic<std::int64_t> copy_latency_us{50};
};

// Never destroyed: stream threads, and static objects released at exit (a pinned pool), may use it
// until the very end.
Runtime& runtime() {
  static Runtime* const instance = new Runtime;
  return *instance;
}

cudaError_t fail(cudaError_t error) {
  last_error = error;
  return error;
}

/// A call stoke should never make: say which and why on stderr, then fail with `error`.
cudaError_t misuse(cudaError_t error, const char* call, const std::string& why) {
  std::fprintf(stderr, "stoke sim: %s: %s\n", call, why.c_str());
  return fail(error);
}

std::string hex(const void* pointer) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", pointer);
  return text;
}

std::uintptr_t key(const void* handle) { return reinterpret_cast<std::uintptr_t>(handle); }

template <class Handle>
Handle new_handle(Runtime& rt) {
  rt.next_handle += 0x10;
  return reinterpret_cast<Handle>(rt.next_handle);
}

std::shared_ptr<StreamState> find_stream(Runtime& rt, cudaStream_t stream) {
  const auto it = rt.streams.find(key(stream));
  return it == rt.streams.end() ? nullptr : it->second;
}

std::shared_ptr<EventState> find_event(Runtime& rt, cudaEvent_t event) {
  const auto it = rt.events.find(key(event));
  return it == rt.events.end() ? nullptr : it->second;
}

cudaError_t unknown_stream(const char* call, cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return misuse(cudaErrorInvalidResourceHandle, call,
                  "CUDA's default stream was used; the simulator (like stoke) supports explicit streams only");
  return misuse(cudaErrorInvalidResourceHandle, call, "unknown stream " + hex(stream) + " (destroyed?)");
}

cudaError_t unknown_event(const char* call, cudaEvent_t event) {
  return misuse(cudaErrorInvalidResourceHandle, call, "unknown event " + hex(event) + " (destroyed?)");
}

/// The live block that contains `pointer`, or null.
const Block* find_block(Runtime& rt, const void* pointer, std::uintptr_t* base) {
  const std::uintptr_t address = key(pointer);
  auto it = rt.blocks.upper_bound(address);
  if (it == rt.blocks.begin()) return nullptr;
  --it;
  if (address >= it->first + std::max<std::size_t>(it->second.bytes, 1)) return nullptr;
  *base = it->first;
  return &it->second;
}

enum class Memory { pageable, pinned, device };

/// Where [pointer, pointer + bytes) lies; cudaErrorInvalidValue when it starts inside a block and
/// runs past its end.
cudaError_t classify(Runtime& rt, const void* pointer, std::size_t bytes, const char* call, Memory* memory) {
  std::uintptr_t base = 0;
  const Block* block = find_block(rt, pointer, &base);
  if (block == nullptr) {
    *memory = Memory::pageable;
    return cudaSuccess;
  }
  if (key(pointer) - base + bytes > block->bytes)
    return misuse(cudaErrorInvalidValue, call,
                  std::to_string(bytes) + " bytes at " + hex(pointer) + " run past the end of the " +
                      std::to_string(block->bytes) + "-byte block at " + hex(reinterpret_cast<void*>(base)));
  *memory = block->device ? Memory::device : Memory::pinned;
  return cudaSuccess;
}

void run_stream(Runtime& rt, const std::shared_ptr<StreamState>& stream) {
  std::unique_lock lock(rt.mutex);
  for (;;) {
    rt.changed.wait(lock, [&] { return !stream->work.empty() || stream->destroyed; });
    if (stream->work.empty()) break;
    std::function<void()> work = std::move(stream->work.front());
    stream->work.pop_front();
    const bool run = rt.sticky == cudaSuccess;  // after a fault, the device runs nothing more
    lock.unlock();
    if (run) {
      try {
        work();
      } catch (const std::exception& error) {
        std::fprintf(stderr, "stoke sim: work on a stream threw: %s; the device fails (cudaErrorLaunchFailure)\n",
                     error.what());
        const std::lock_guard failed(rt.mutex);
        if (rt.sticky == cudaSuccess) rt.sticky = cudaErrorLaunchFailure;
      }
    }
    work = nullptr;  // what it captured is destroyed outside the lock
    lock.lock();
    ++stream->completed;
    rt.changed.notify_all();
  }
  stream->finished = true;
  rt.changed.notify_all();
}

/// Joins the threads of destroyed streams that have finished their work.
void reap(Runtime& rt) {
  std::erase_if(rt.retired, [](const std::shared_ptr<StreamState>& stream) {
    if (!stream->finished) return false;
    stream->thread.join();  // it has left the lock for good
    return true;
  });
}

cudaError_t enqueue_locked(Runtime& rt, cudaStream_t stream, std::function<void()> work, const char* call) {
  if (rt.sticky != cudaSuccess) return fail(rt.sticky);
  const std::shared_ptr<StreamState> state = find_stream(rt, stream);
  if (!state) return unknown_stream(call, stream);
  state->work.push_back(std::move(work));
  ++state->enqueued;
  rt.changed.notify_all();
  return cudaSuccess;
}

/// Waits until every stream (destroyed ones too) has run what was enqueued before the call: what
/// cudaFree, cudaFreeHost and cudaDeviceSynchronize do.
void synchronize_device(Runtime& rt, std::unique_lock<std::mutex>& lock) {
  std::vector<std::pair<std::shared_ptr<StreamState>, std::uint64_t>> targets;
  for (const auto& [handle, stream] : rt.streams) targets.emplace_back(stream, stream->enqueued);
  for (const auto& stream : rt.retired) targets.emplace_back(stream, stream->enqueued);
  rt.changed.wait(lock, [&] {
    return rt.sticky != cudaSuccess || std::all_of(targets.begin(), targets.end(), [](const auto& target) {
             return target.first->completed >= target.second;
           });
  });
  reap(rt);
}

/// Waits for a record; the sticky error when the device fails first.
cudaError_t wait_for(Runtime& rt, std::unique_lock<std::mutex>& lock, const std::shared_ptr<Record>& record) {
  rt.changed.wait(lock, [&] { return record->done || rt.sticky != cudaSuccess; });
  return rt.sticky != cudaSuccess ? fail(rt.sticky) : cudaSuccess;
}

void copy_delay(Runtime& rt) {
  const auto latency = std::chrono::microseconds(rt.copy_latency_us.load(std::memory_order_relaxed));
  if (latency.count() > 0) std::this_thread::sleep_for(latency);
}

cudaError_t allocate(Runtime& rt, void** pointer, std::size_t bytes, bool device) {
  const std::size_t alignment = device ? device_alignment : page;
  if (bytes > max_host_block) return fail(cudaErrorMemoryAllocation);  // before rounding can overflow
  const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* block = std::aligned_alloc(alignment, rounded);
  if (block == nullptr) return fail(cudaErrorMemoryAllocation);
  rt.blocks[key(block)] = Block{bytes, device};
  if (device) rt.device_bytes += bytes;
  *pointer = block;
  return cudaSuccess;
}

cudaError_t release(Runtime& rt, std::unique_lock<std::mutex>& lock, void* pointer, bool device, const char* call) {
  const cudaError_t sticky = rt.sticky;
  if (sticky == cudaSuccess) synchronize_device(rt, lock);
  const auto it = rt.blocks.find(key(pointer));
  if (it == rt.blocks.end() || it->second.device != device)
    return misuse(cudaErrorInvalidValue, call,
                  hex(pointer) + " is not the start of a live " + (device ? "cudaMalloc" : "cudaHostAlloc") +
                      " block (freed twice?)");
  if (device) rt.device_bytes -= it->second.bytes;
  rt.blocks.erase(it);
  std::free(pointer);
  return sticky == cudaSuccess ? cudaSuccess : fail(sticky);
}

const char* error_name(cudaError_t error) {
  switch (error) {
#define STOKE_SIM_NAME(code) \
  case code:                 \
    return #code;
    STOKE_SIM_NAME(cudaSuccess)
    STOKE_SIM_NAME(cudaErrorInvalidValue)
    STOKE_SIM_NAME(cudaErrorMemoryAllocation)
    STOKE_SIM_NAME(cudaErrorInitializationError)
    STOKE_SIM_NAME(cudaErrorCudartUnloading)
    STOKE_SIM_NAME(cudaErrorInsufficientDriver)
    STOKE_SIM_NAME(cudaErrorNoDevice)
    STOKE_SIM_NAME(cudaErrorInvalidDevice)
    STOKE_SIM_NAME(cudaErrorInvalidResourceHandle)
    STOKE_SIM_NAME(cudaErrorNotReady)
    STOKE_SIM_NAME(cudaErrorIllegalAddress)
    STOKE_SIM_NAME(cudaErrorLaunchFailure)
    STOKE_SIM_NAME(cudaErrorNotSupported)
    STOKE_SIM_NAME(cudaErrorUnknown)
#undef STOKE_SIM_NAME
    default:
      return nullptr;
  }
}

}  // namespace

// ---- the extension API --------------------------------------------------------------------------

cudaError_t enqueue(cudaStream_t stream, std::function<void()> work) {
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  return enqueue_locked(rt, stream, std::move(work), "stoke::gpu::sim::enqueue");
}

cudaError_t check_kernel_access(const void* pointer, std::size_t bytes, const char* what) {
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  Memory memory = Memory::pageable;
  if (classify(rt, pointer, bytes, what, &memory) != cudaSuccess || memory == Memory::pageable)
    return misuse(cudaErrorIllegalAddress, what,
                  std::to_string(bytes) + " bytes at " + hex(pointer) + " are not device-accessible memory");
  return cudaSuccess;
}

std::size_t device_bytes_in_use() {
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  return rt.device_bytes;
}

std::size_t host_blocks_in_use() {
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  return static_cast<std::size_t>(
      std::count_if(rt.blocks.begin(), rt.blocks.end(), [](const auto& entry) { return !entry.second.device; }));
}

void fail_host_alloc_after(int successes) {
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  rt.host_allocs_left = successes;
}

void set_copy_latency(std::chrono::microseconds latency) { runtime().copy_latency_us = latency.count(); }

cudaError_t fail_device(cudaStream_t stream, cudaError_t error) {
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  return enqueue_locked(
      rt, stream,
      [&rt, error] {
        const std::lock_guard failed(rt.mutex);
        if (rt.sticky == cudaSuccess) rt.sticky = error;
      },
      "stoke::gpu::sim::fail_device");
}

void set_driver_version(int version) { driver_version.store(version); }

void reset_device() {
  driver_version.store(CUDART_VERSION);
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  rt.sticky = cudaSuccess;
  rt.host_allocs_left = -1;
  // Records the failed device never reached would otherwise be waited for forever.
  for (const auto& [handle, event] : rt.events) {
    if (event->latest && !event->latest->done) {
      event->latest->done = true;
      event->latest->at = Clock::now();
    }
  }
  rt.changed.notify_all();
}

}  // namespace stoke::gpu::sim

// ---- the CUDA runtime API -----------------------------------------------------------------------

using namespace stoke::gpu::sim;  // NOLINT: this file implements it

extern "C" {

// -- errors

cudaError_t cudaGetLastError() { return std::exchange(last_error, cudaSuccess); }

cudaError_t cudaPeekAtLastError() { return last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  const char* name = error_name(error);
  return name != nullptr ? name : "unrecognized error code";
}

// -- the device

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  if (driver_version.load() < CUDART_VERSION) {
    *count = 0;
    return fail(cudaErrorInsufficientDriver);
  }
  *count = device_count;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return fail(cudaErrorInvalidValue);
  *version = driver_version.load();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  if (properties == nullptr) return fail(cudaErrorInvalidValue);
  if (device < 0 || device >= device_count) return fail(cudaErrorInvalidDevice);
  *properties = cudaDeviceProp{};
  std::snprintf(properties->name, sizeof properties->name, "stoke simulated GPU");
  properties->totalGlobalMem = device_memory;
  properties->major = 9;
  properties->minor = 0;
  properties->multiProcessorCount = multiprocessors;
  properties->warpSize = 32;
  properties->maxThreadsPerBlock = 1024;
  properties->pciBusID = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  if (device < 0 || device >= device_count) return fail(cudaErrorInvalidDevice);
  switch (attribute) {
    case cudaDevAttrMultiProcessorCount:
      *value = multiprocessors;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      return cudaSuccess;
    case cudaDevAttrWarpSize:
      *value = 32;
      return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = 1024;
      return cudaSuccess;
    default:
      return misuse(cudaErrorInvalidValue, "cudaDeviceGetAttribute",
                    "attribute " + std::to_string(static_cast<int>(attribute)) + " is not simulated; add it");
  }
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least != nullptr) *least = least_priority;
  if (greatest != nullptr) *greatest = greatest_priority;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int length, int device) {
  if (bus_id == nullptr || length <= 0) return fail(cudaErrorInvalidValue);
  if (device < 0 || device >= device_count) return fail(cudaErrorInvalidDevice);
  std::snprintf(bus_id, static_cast<std::size_t>(length), "0000:%02x:00.0", device);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  if (rt.sticky != cudaSuccess) return fail(rt.sticky);
  if (free != nullptr) *free = device_memory - rt.device_bytes;
  if (total != nullptr) *total = device_memory;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  Runtime& rt = runtime();
  std::unique_lock lock(rt.mutex);
  synchronize_device(rt, lock);
  return rt.sticky != cudaSuccess ? fail(rt.sticky) : cudaSuccess;
}

// -- memory

cudaError_t cudaMalloc(void** pointer, std::size_t bytes) {
  if (pointer == nullptr) return fail(cudaErrorInvalidValue);
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  if (rt.sticky != cudaSuccess) return fail(rt.sticky);
  *pointer = nullptr;
  if (bytes == 0) return cudaSuccess;
  if (bytes > device_memory - rt.device_bytes) return fail(cudaErrorMemoryAllocation);
  return allocate(rt, pointer, bytes, /*device=*/true);
}

cudaError_t cudaFree(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  Runtime& rt = runtime();
  std::unique_lock lock(rt.mutex);
  return release(rt, lock, pointer, /*device=*/true, "cudaFree");
}

cudaError_t cudaHostAlloc(void** pointer, std::size_t bytes, unsigned int flags) {
  if (pointer == nullptr) return fail(cudaErrorInvalidValue);
  if ((flags & ~(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined)) != 0)
    return fail(cudaErrorInvalidValue);
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  if (rt.sticky != cudaSuccess) return fail(rt.sticky);
  *pointer = nullptr;
  if (bytes == 0) return cudaSuccess;
  if (rt.host_allocs_left == 0) return fail(cudaErrorMemoryAllocation);
  if (rt.host_allocs_left > 0) --rt.host_allocs_left;
  return allocate(rt, pointer, bytes, /*device=*/false);
}

cudaError_t cudaFreeHost(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  Runtime& rt = runtime();
  std::unique_lock lock(rt.mutex);
  return release(rt, lock, pointer, /*device=*/false, "cudaFreeHost");
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* pointer) {
  if (attributes == nullptr) return fail(cudaErrorInvalidValue);
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  Memory memory = Memory::pageable;
  std::uintptr_t base = 0;
  if (const Block* block = find_block(rt, pointer, &base)) memory = block->device ? Memory::device : Memory::pinned;
  *attributes = cudaPointerAttributes{};
  attributes->device = memory == Memory::pageable ? -2 : 0;  // CUDA's value for unregistered memory
  switch (memory) {
    case Memory::pageable:
      attributes->type = cudaMemoryTypeUnregistered;
      break;
    case Memory::pinned:
      attributes->type = cudaMemoryTypeHost;
      attributes->hostPointer = const_cast<void*>(pointer);
      attributes->devicePointer = const_cast<void*>(pointer);
      break;
    case Memory::device:
      attributes->type = cudaMemoryTypeDevice;
      attributes->devicePointer = const_cast<void*>(pointer);
      break;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return fail(cudaErrorInvalidValue);
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  if (rt.sticky != cudaSuccess) return fail(rt.sticky);
  if (!find_stream(rt, stream)) return unknown_stream("cudaMemcpyAsync", stream);
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return misuse(cudaErrorInvalidValue, "cudaMemcpyAsync", "a null pointer");
  Memory from = Memory::pageable;
  Memory to = Memory::pageable;
  if (const cudaError_t error = classify(rt, src, bytes, "cudaMemcpyAsync (source)", &from); error != cudaSuccess)
    return error;
  if (const cudaError_t error = classify(rt, dst, bytes, "cudaMemcpyAsync (destination)", &to); error != cudaSuccess)
    return error;
  std::function<void()> copy;
  if (from == Memory::pageable) {
    // CUDA stages a pageable source before the call returns: the caller may reuse it at once.
    auto staged = std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(src),
                                                           static_cast<const std::byte*>(src) + bytes);
    copy = [&rt, dst, staged] {
      copy_delay(rt);
      std::memcpy(dst, staged->data(), staged->size());
    };
  } else {
    copy = [&rt, dst, src, bytes] {
      copy_delay(rt);
      std::memmove(dst, src, bytes);
    };
  }
  return enqueue_locked(rt, stream, std::move(copy), "cudaMemcpyAsync");
}

cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t stream) {
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  if (rt.sticky != cudaSuccess) return fail(rt.sticky);
  if (!find_stream(rt, stream)) return unknown_stream("cudaMemsetAsync", stream);
  if (bytes == 0) return cudaSuccess;
  Memory to = Memory::pageable;
  if (const cudaError_t error = classify(rt, dst, bytes, "cudaMemsetAsync", &to); error != cudaSuccess) return error;
  if (to == Memory::pageable)
    return misuse(cudaErrorInvalidValue, "cudaMemsetAsync", hex(dst) + " is not device memory");
  return enqueue_locked(
      rt, stream,
      [&rt, dst, value, bytes] {
        copy_delay(rt);
        std::memset(dst, value, bytes);
      },
      "cudaMemsetAsync");
}

// -- streams

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority) {
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) return fail(cudaErrorInvalidValue);
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  if (rt.sticky != cudaSuccess) return fail(rt.sticky);
  reap(rt);
  auto state = std::make_shared<StreamState>();
  state->device = current_device;
  state->flags = flags;
  state->priority = std::clamp(priority, greatest_priority, least_priority);  // CUDA clamps too
  state->thread = std::thread([&rt, state] { run_stream(rt, state); });
  *stream = new_handle<cudaStream_t>(rt);
  rt.streams.emplace(key(*stream), std::move(state));
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  const auto it = rt.streams.find(key(stream));
  if (it == rt.streams.end()) return unknown_stream("cudaStreamDestroy", stream);
  // Returns at once; the work already enqueued still runs (CUDA's rule).
  it->second->destroyed = true;
  rt.retired.push_back(std::move(it->second));
  rt.streams.erase(it);
  rt.changed.notify_all();
  reap(rt);
  return rt.sticky != cudaSuccess ? fail(rt.sticky) : cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Runtime& rt = runtime();
  std::unique_lock lock(rt.mutex);
  const std::shared_ptr<StreamState> state = find_stream(rt, stream);
  if (!state) return unknown_stream("cudaStreamSynchronize", stream);
  const std::uint64_t target = state->enqueued;
  rt.changed.wait(lock, [&] { return state->completed >= target || rt.sticky != cudaSuccess; });
  return rt.sticky != cudaSuccess ? fail(rt.sticky) : cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  if (rt.sticky != cudaSuccess) return fail(rt.sticky);
  const std::shared_ptr<StreamState> state = find_stream(rt, stream);
  if (!state) return unknown_stream("cudaStreamQuery", stream);
  return state->completed == state->enqueued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (flags != 0) return fail(cudaErrorInvalidValue);
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  if (rt.sticky != cudaSuccess) return fail(rt.sticky);
  const std::shared_ptr<EventState> state = find_event(rt, event);
  if (!state) return unknown_event("cudaStreamWaitEvent", event);
  if (!find_stream(rt, stream)) return unknown_stream("cudaStreamWaitEvent", stream);
  std::shared_ptr<Record> record = state->latest;  // the latest record at the time of the call
  if (!record) return cudaSuccess;                 // never recorded: nothing to wait for
  return enqueue_locked(
      rt, stream,
      [&rt, record] {
        std::unique_lock wait(rt.mutex);
        rt.changed.wait(wait, [&] { return record->done || rt.sticky != cudaSuccess; });
      },
      "cudaStreamWaitEvent");
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  if (flags == nullptr) return fail(cudaErrorInvalidValue);
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  const std::shared_ptr<StreamState> state = find_stream(rt, stream);
  if (!state) return unknown_stream("cudaStreamGetFlags", stream);
  *flags = state->flags;
  return cudaSuccess;
}

cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  if (priority == nullptr) return fail(cudaErrorInvalidValue);
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  const std::shared_ptr<StreamState> state = find_stream(rt, stream);
  if (!state) return unknown_stream("cudaStreamGetPriority", stream);
  *priority = state->priority;
  return cudaSuccess;
}

// -- events

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  constexpr unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (event == nullptr || (flags & ~known) != 0) return fail(cudaErrorInvalidValue);
  if ((flags & cudaEventInterprocess) != 0 && (flags & cudaEventDisableTiming) == 0) return fail(cudaErrorInvalidValue);
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  if (rt.sticky != cudaSuccess) return fail(rt.sticky);
  auto state = std::make_shared<EventState>();
  state->device = current_device;
  state->flags = flags;
  *event = new_handle<cudaEvent_t>(rt);
  rt.events.emplace(key(*event), std::move(state));
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  // A record still pending completes all the same: its work holds the Record.
  if (rt.events.erase(key(event)) == 0) return unknown_event("cudaEventDestroy", event);
  return rt.sticky != cudaSuccess ? fail(rt.sticky) : cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  if (rt.sticky != cudaSuccess) return fail(rt.sticky);
  const std::shared_ptr<EventState> state = find_event(rt, event);
  if (!state) return unknown_event("cudaEventRecord", event);
  const std::shared_ptr<StreamState> on = find_stream(rt, stream);
  if (!on) return unknown_stream("cudaEventRecord", stream);
  if (on->device != state->device)
    return misuse(cudaErrorInvalidResourceHandle, "cudaEventRecord",
                  "the event and the stream are on different devices");
  auto record = std::make_shared<Record>();
  state->latest = record;
  return enqueue_locked(
      rt, stream,
      [&rt, record] {
        const std::lock_guard done(rt.mutex);
        record->at = Clock::now();
        record->done = true;
      },
      "cudaEventRecord");
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  if (rt.sticky != cudaSuccess) return fail(rt.sticky);
  const std::shared_ptr<EventState> state = find_event(rt, event);
  if (!state) return unknown_event("cudaEventQuery", event);
  return !state->latest || state->latest->done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Runtime& rt = runtime();
  std::unique_lock lock(rt.mutex);
  if (rt.sticky != cudaSuccess) return fail(rt.sticky);
  const std::shared_ptr<EventState> state = find_event(rt, event);
  if (!state) return unknown_event("cudaEventSynchronize", event);
  if (!state->latest) return cudaSuccess;
  const std::shared_ptr<Record> record = state->latest;
  return wait_for(rt, lock, record);
}

cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start, cudaEvent_t end) {
  if (milliseconds == nullptr) return fail(cudaErrorInvalidValue);
  Runtime& rt = runtime();
  const std::lock_guard lock(rt.mutex);
  if (rt.sticky != cudaSuccess) return fail(rt.sticky);
  const std::shared_ptr<EventState> first = find_event(rt, start);
  if (!first) return unknown_event("cudaEventElapsedTime", start);
  const std::shared_ptr<EventState> second = find_event(rt, end);
  if (!second) return unknown_event("cudaEventElapsedTime", end);
  // CUDA's rules: both timed and recorded (else an invalid handle), both complete (else not ready).
  if (((first->flags | second->flags) & cudaEventDisableTiming) != 0) return fail(cudaErrorInvalidResourceHandle);
  if (!first->latest || !second->latest) return fail(cudaErrorInvalidResourceHandle);
  if (!first->latest->done || !second->latest->done) return fail(cudaErrorNotReady);
  *milliseconds = std::chrono::duration<float, std::milli>(second->latest->at - first->latest->at).count();
  return cudaSuccess;
}

}  // extern "C"
