// The CUDA runtime wrappers on a real device: streams ordered by events, copies and fills through
// pinned and pageable memory, timing, out of memory, moves, the check macro's error, cuBLAS and
// cuDNN handles bound to streams, pinned batch pools and DeviceGuard. Every test skips when no
// CUDA device is usable (label gpu).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/error.hpp>
#include <stoke/gpu/event.hpp>
#include <stoke/gpu/handles.hpp>
#include <stoke/gpu/memory.hpp>
#include <stoke/gpu/pinned_allocator.hpp>
#include <stoke/gpu/stream.hpp>
#include <stoke/nodes/batch_pool.hpp>
#include <string>
#include <utility>
#include <vector>

namespace stoke::gpu {
namespace {

const Device gpu0 = Device::cuda(0);

class CudaRuntime : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no usable CUDA device: " << cuda_unavailable_reason();
  }
};

std::vector<std::byte> random_bytes(std::size_t size, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::byte> bytes(size);
  for (auto& b : bytes) b = static_cast<std::byte>(byte(generator));
  return bytes;
}

std::vector<std::byte> to_host(const DeviceBuffer& buffer, StreamView stream) {
  std::vector<std::byte> host(buffer.size());
  copy_async(host.data(), buffer.data(), buffer.size(), stream);
  stream.synchronize();
  return host;
}

TEST_F(CudaRuntime, StreamWaitsForAnEventRecordedOnAnother) {
  Stream producer(gpu0);
  Stream consumer(gpu0, StreamPriority::high);
  Event filled(gpu0);
  constexpr std::size_t size = 64 << 20;
  DeviceBuffer buffer(gpu0, size);
  PinnedBuffer host(size);
  std::memset(host.data(), 0, size);

  fill_async(buffer.data(), 7, size, producer);
  filled.record(producer);
  consumer.wait(filled);  // the copy below must see the fill, though the host never waited
  copy_async(host.data(), buffer.data(), size, consumer);
  consumer.synchronize();

  EXPECT_TRUE(filled.ready());
  EXPECT_TRUE(producer.ready());
  EXPECT_TRUE(consumer.ready());
  EXPECT_TRUE(std::all_of(host.data(), host.data() + size, [](std::byte b) { return b == std::byte{7}; }));
}

TEST_F(CudaRuntime, StreamsAreNonBlockingAndHighPriorityIsTheGreatest) {
  int least = 0;
  int greatest = 0;
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  const Stream normal(gpu0);
  const Stream high(gpu0, StreamPriority::high);
  unsigned int flags = 0;
  ASSERT_EQ(cudaStreamGetFlags(normal.native(), &flags), cudaSuccess);
  EXPECT_EQ(flags & cudaStreamNonBlocking, cudaStreamNonBlocking);
  int priority = 1;
  ASSERT_EQ(cudaStreamGetPriority(high.native(), &priority), cudaSuccess);
  EXPECT_EQ(priority, greatest);
  EXPECT_EQ(normal.view().device(), gpu0);
  EXPECT_NE(normal.native(), high.native());
}

TEST_F(CudaRuntime, CopiesThroughPinnedAndPageableMemoryAreByteIdentical) {
  Stream stream(gpu0);
  constexpr std::size_t size = (3 << 20) + 17;  // not a multiple of anything convenient
  const std::vector<std::byte> original = random_bytes(size, 1);
  DeviceBuffer device(gpu0, size);
  DeviceBuffer device_copy(gpu0, size);

  // Pinned: host -> device -> device -> host, all asynchronous, one synchronization.
  PinnedBuffer pinned_in(size);
  PinnedBuffer pinned_out(size);
  std::memcpy(pinned_in.data(), original.data(), size);
  copy_async(device.data(), pinned_in.data(), size, stream);
  copy_async(device_copy.data(), device.data(), size, stream);
  copy_async(pinned_out.data(), device_copy.data(), size, stream);
  stream.synchronize();
  EXPECT_EQ(std::memcmp(pinned_out.data(), original.data(), size), 0);

  // Pageable: the same, from and to ordinary vectors.
  fill_async(device.data(), 0, size, stream);
  copy_async(device.data(), original.data(), size, stream);
  EXPECT_EQ(to_host(device, stream), original);
}

TEST_F(CudaRuntime, FillAsyncSetsExactlyTheBytesAsked) {
  Stream stream(gpu0);
  constexpr std::size_t size = 1 << 20;
  constexpr std::size_t offset = 4097;
  constexpr std::size_t length = 300'001;
  DeviceBuffer buffer(gpu0, size);
  fill_async(buffer.data(), 0, size, stream);
  fill_async(buffer.as<std::byte>() + offset, 0xAB, length, stream);
  const std::vector<std::byte> host = to_host(buffer, stream);
  for (std::size_t i = 0; i < size; ++i) {
    const std::byte expected = (i >= offset && i < offset + length) ? std::byte{0xAB} : std::byte{0};
    ASSERT_EQ(host[i], expected) << "byte " << i;
  }
}

TEST_F(CudaRuntime, TimingEventsMeasureTheWorkBetweenThem) {
  Stream stream(gpu0);
  Event start(gpu0, {.timing = true});
  Event end(gpu0, {.timing = true});
  constexpr std::size_t size = 256 << 20;
  DeviceBuffer a(gpu0, size);
  DeviceBuffer b(gpu0, size);
  start.record(stream);
  for (int i = 0; i < 4; ++i) {
    fill_async(a.data(), i, size, stream);
    copy_async(b.data(), a.data(), size, stream);
  }
  end.record(stream);
  end.synchronize();
  EXPECT_TRUE(end.ready());
  const auto elapsed = Event::elapsed(start, end);
  EXPECT_GT(elapsed.count(), 0.0);

  // Events made without timing cannot be timed: CUDA says so, and the error says which call.
  Event untimed_start(gpu0);
  Event untimed_end(gpu0);
  untimed_start.record(stream);
  untimed_end.record(stream);
  untimed_end.synchronize();
  EXPECT_THROW(Event::elapsed(untimed_start, untimed_end), CudaError);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the failure was not left as the thread's last error";
}

TEST_F(CudaRuntime, HugeAllocationThrowsOutOfMemoryAndTheDeviceStaysUsable) {
  constexpr std::size_t one_pib = std::size_t{1} << 50;
  try {
    DeviceBuffer huge(gpu0, one_pib);
    FAIL() << "a 1 PiB cudaMalloc succeeded";
  } catch (const CudaOutOfMemory& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("cuda:0: out of memory allocating 1.0 PiB (free "), std::string::npos) << message;
    EXPECT_NE(message.find("cudaMalloc"), std::string::npos) << message;
    EXPECT_NE(message.find("cudaErrorMemoryAllocation"), std::string::npos) << message;
    EXPECT_NE(message.find("memory.cpp:"), std::string::npos) << message;
    EXPECT_EQ(error.code(), cudaErrorMemoryAllocation);
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);

  Stream stream(gpu0);
  DeviceBuffer small(gpu0, 4096);
  fill_async(small.data(), 0x5A, small.size(), stream);
  const std::vector<std::byte> host = to_host(small, stream);
  EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](std::byte b) { return b == std::byte{0x5A}; }));
}

TEST_F(CudaRuntime, ZeroByteBuffersAllocateNothing) {
  const DeviceBuffer device(gpu0, 0);
  EXPECT_TRUE(device.empty());
  EXPECT_EQ(device.size(), 0u);
  const PinnedBuffer pinned(0);
  EXPECT_EQ(pinned.data(), nullptr);
  EXPECT_TRUE(pinned.bytes().empty());
}

TEST_F(CudaRuntime, MovedFromOwnersAreEmpty) {
  Stream stream(gpu0);
  CUstream_st* const native_stream = stream.native();
  Stream moved_stream(std::move(stream));
  EXPECT_EQ(stream.native(), nullptr);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(moved_stream.native(), native_stream);
  Stream assigned_stream(gpu0);
  assigned_stream = std::move(moved_stream);
  EXPECT_EQ(moved_stream.native(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(assigned_stream.native(), native_stream);
  // A moved-from Stream's view has no stream, and stoke never falls back to the legacy one.
  std::array<std::byte, 8> bytes{};
  EXPECT_THROW(copy_async(bytes.data(), bytes.data(), bytes.size(), moved_stream.view()), DeviceError);

  Event event(gpu0);
  Event moved_event(std::move(event));
  EXPECT_EQ(event.native(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_NE(moved_event.native(), nullptr);
  EXPECT_THROW(event.record(assigned_stream), DeviceError);

  DeviceBuffer buffer(gpu0, 1024);
  void* const data = buffer.data();
  DeviceBuffer moved_buffer(std::move(buffer));
  EXPECT_TRUE(buffer.empty());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(buffer.size(), 0u);
  EXPECT_EQ(moved_buffer.data(), data);
  EXPECT_EQ(moved_buffer.size(), 1024u);
  DeviceBuffer assigned_buffer(gpu0, 16);
  assigned_buffer = std::move(moved_buffer);  // frees its own 16 bytes
  EXPECT_TRUE(moved_buffer.empty());          // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(assigned_buffer.data(), data);

  PinnedBuffer pinned(1024);
  std::byte* const pinned_data = pinned.data();
  PinnedBuffer moved_pinned(std::move(pinned));
  EXPECT_EQ(pinned.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(pinned.size(), 0u);
  EXPECT_EQ(moved_pinned.data(), pinned_data);

  CublasHandle cublas(assigned_stream);
  CublasHandle moved_cublas(std::move(cublas));
  EXPECT_EQ(cublas.native(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_NE(moved_cublas.native(), nullptr);
  CudnnHandle cudnn(assigned_stream);
  CudnnHandle moved_cudnn(std::move(cudnn));
  EXPECT_EQ(cudnn.native(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_NE(moved_cudnn.native(), nullptr);
}

TEST_F(CudaRuntime, CheckMacroThrowsCudaErrorNamingTheFileAndTheCall) {
  const int line = __LINE__ + 2;
  try {
    STOKE_CUDA_CHECK(cudaSetDevice(9999));
    FAIL() << "cudaSetDevice(9999) succeeded";
  } catch (const CudaError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("cuda_runtime_test.cpp:" + std::to_string(line) +
                           ": cudaSetDevice(9999) failed: "
                           "cudaErrorInvalidDevice ("),
              std::string::npos)
        << message;
    EXPECT_EQ(error.library(), "CUDA");
    EXPECT_EQ(error.code(), cudaErrorInvalidDevice);
    EXPECT_EQ(error.call(), "cudaSetDevice(9999)");
    EXPECT_EQ(error.line(), line);
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the failure was not left as the thread's last error";
}

TEST_F(CudaRuntime, CublasHandleRunsOnItsStream) {
  Stream stream(gpu0);
  Stream other(gpu0);
  CublasHandle handle(stream);
  cudaStream_t bound = nullptr;
  ASSERT_EQ(cublasGetStream(handle.native(), &bound), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(bound, stream.native());
  EXPECT_EQ(handle.stream(), stream.view());

  // y = 2 x + y on the handle's stream, read back on the same stream.
  const std::array<float, 4> x{1.0F, 2.0F, 3.0F, 4.0F};
  const std::array<float, 4> y{10.0F, 20.0F, 30.0F, 40.0F};
  DeviceBuffer dx(gpu0, sizeof x);
  DeviceBuffer dy(gpu0, sizeof y);
  copy_async(dx.data(), x.data(), sizeof x, stream);
  copy_async(dy.data(), y.data(), sizeof y, stream);
  const float alpha = 2.0F;
  STOKE_CUBLAS_CHECK(cublasSaxpy(handle.native(), 4, &alpha, dx.as<float>(), 1, dy.as<float>(), 1));
  std::array<float, 4> result{};
  copy_async(result.data(), dy.data(), sizeof result, stream);
  stream.synchronize();
  EXPECT_EQ(result, (std::array<float, 4>{12.0F, 24.0F, 36.0F, 48.0F}));

  handle.set_stream(other);
  ASSERT_EQ(cublasGetStream(handle.native(), &bound), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(bound, other.native());
  EXPECT_THROW(handle.set_stream(StreamView::host()), DeviceError);
  EXPECT_THROW(CublasHandle{StreamView::host()}, DeviceError);
}

TEST_F(CudaRuntime, CudnnHandleRunsOnItsStream) {
  Stream stream(gpu0);
  Stream other(gpu0);
  CudnnHandle handle(stream);
  cudaStream_t bound = nullptr;
  ASSERT_EQ(cudnnGetStream(handle.native(), &bound), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(bound, stream.native());

  // Set every element of a 1x2x3x4 float tensor to 1.5 on the handle's stream.
  cudnnTensorDescriptor_t raw = nullptr;
  STOKE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&raw));
  const std::unique_ptr<cudnnTensorStruct, void (*)(cudnnTensorDescriptor_t)> descriptor(
      raw, [](cudnnTensorDescriptor_t d) { STOKE_CUDNN_REPORT(cudnnDestroyTensorDescriptor(d)); });
  STOKE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(raw, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 2, 3, 4));
  DeviceBuffer tensor(gpu0, 24 * sizeof(float));
  fill_async(tensor.data(), 0, tensor.size(), stream);
  const float value = 1.5F;
  STOKE_CUDNN_CHECK(cudnnSetTensor(handle.native(), raw, tensor.data(), &value));
  std::array<float, 24> result{};
  copy_async(result.data(), tensor.data(), sizeof result, stream);
  stream.synchronize();
  EXPECT_TRUE(std::all_of(result.begin(), result.end(), [](float v) { return v == 1.5F; }));

  handle.set_stream(other);
  ASSERT_EQ(cudnnGetStream(handle.native(), &bound), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(bound, other.native());
  EXPECT_THROW(CudnnHandle{StreamView::host()}, DeviceError);
}

TEST_F(CudaRuntime, CudnnCheckMacroThrowsCudnnError) {
  EXPECT_THROW(STOKE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(nullptr, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 1, 1)),
               CudnnError);
  EXPECT_THROW(STOKE_CUBLAS_CHECK(cublasSetStream(nullptr, nullptr)), CublasError);
}

TEST_F(CudaRuntime, BatchPoolOnPinnedMemory) {
  const nodes::BatchShape shape{.batch_size = 8, .height = 32, .width = 32, .channels = 3};
  nodes::BatchPool pool(shape, 3, pinned_allocator());
  EXPECT_EQ(pool.allocator().name(), "cuda-pinned");
  EXPECT_EQ(batch_allocator(gpu0), pinned_allocator());
  nodes::Batch batch = pool.acquire();
  batch.set_size(shape.batch_size);
  std::byte* const data = batch.data().data();
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(data) % nodes::BatchPool::slot_alignment, 0u);
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, data), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost) << "a pool slot is page-locked host memory";

  // The slot crosses to the device and back with asynchronous copies.
  Stream stream(gpu0);
  const std::vector<std::byte> original = random_bytes(batch.data().size(), 2);
  std::memcpy(data, original.data(), original.size());
  DeviceBuffer device(gpu0, original.size());
  copy_async(device.data(), data, original.size(), stream);
  stream.synchronize();  // the slot may be overwritten only once its copy has run
  std::memset(data, 0, original.size());
  copy_async(data, device.data(), original.size(), stream);
  stream.synchronize();
  EXPECT_EQ(std::memcmp(data, original.data(), original.size()), 0);
}

TEST_F(CudaRuntime, PinnedAllocatorRejectsAlignmentsAboveAPage) {
  const nodes::AllocatorPtr allocator = pinned_allocator();
  EXPECT_THROW(allocator->allocate(1 << 20, 8192), std::invalid_argument);
  void* block = allocator->allocate(1 << 20, 4096);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(block) % 4096, 0u);
  allocator->deallocate(block, 1 << 20, 4096);
}

// cudaHostAlloc does not always return page-aligned blocks (on the first GPU run, an H200 VM,
// blocks under a megabyte came back at other offsets): every size and alignment asked for is
// honoured anyway, the whole block is page-locked and writable, and several live blocks do not
// overlap.
TEST_F(CudaRuntime, PinnedBlocksAreAlignedWhateverCudaHostAllocReturns) {
  const nodes::AllocatorPtr allocator = pinned_allocator();
  struct Block {
    std::byte* data;
    std::size_t bytes, alignment;
  };
  std::vector<Block> blocks;
  for (const std::size_t bytes : {std::size_t{1}, std::size_t{100}, std::size_t{4096}, std::size_t{786432},
                                  std::size_t{3} << 20}) {
    for (const std::size_t alignment : {std::size_t{1}, std::size_t{64}, std::size_t{4096}}) {
      auto* data = static_cast<std::byte*>(allocator->allocate(bytes, alignment));
      ASSERT_NE(data, nullptr);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(data) % alignment, 0u) << bytes << " bytes";
      cudaPointerAttributes attributes{};
      ASSERT_EQ(cudaPointerGetAttributes(&attributes, data + bytes - 1), cudaSuccess);
      EXPECT_EQ(attributes.type, cudaMemoryTypeHost) << "the block's last byte is page-locked too";
      std::memset(data, static_cast<int>(blocks.size()), bytes);
      blocks.push_back({data, bytes, alignment});
    }
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const Block& b = blocks[i];
    EXPECT_EQ(b.data[0], static_cast<std::byte>(i)) << "block " << i << " was overwritten";
    EXPECT_EQ(b.data[b.bytes - 1], static_cast<std::byte>(i)) << "block " << i << " was overwritten";
    allocator->deallocate(b.data, b.bytes, b.alignment);
  }
}

TEST_F(CudaRuntime, DeviceGuardRestoresThePreviousDevice) {
  const int count = cuda_device_count();
  const int other = count > 1 ? 1 : 0;
  ASSERT_EQ(cudaSetDevice(other), cudaSuccess);
  {
    const DeviceGuard guard(gpu0);
    int current = -1;
    ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
    EXPECT_EQ(current, 0);
  }
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, other);
  {
    const DeviceGuard cpu_guard(Device::cpu());
    ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
    EXPECT_EQ(current, other) << "the CPU guard changes nothing";
  }
  const std::string missing = Device::cuda(count).str();
  try {
    const DeviceGuard guard(Device::cuda(count));
    FAIL() << "a guard for " << missing << " was made";
  } catch (const DeviceError& error) {
    EXPECT_NE(std::string(error.what()).find(missing + " does not exist"), std::string::npos) << error.what();
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

TEST_F(CudaRuntime, DeviceQueries) {
  EXPECT_EQ(cuda_unavailable_reason(), "");
  std::ostringstream log;
  EXPECT_EQ(select_device("auto", &log), gpu0);
  EXPECT_EQ(log.str(), "");
  EXPECT_EQ(select_device("cuda"), gpu0);
  const DeviceInfo info = device_info(gpu0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.compute_major, 7);
  EXPECT_GT(info.multiprocessors, 0);
  EXPECT_GT(info.total_memory, std::size_t{1} << 30);
  const MemoryInfo memory = memory_info(gpu0);
  EXPECT_GT(memory.free, 0u);
  EXPECT_LE(memory.free, memory.total);
  EXPECT_EQ(info.describe().rfind("cuda:0 " + info.name + " (sm_", 0), 0u) << info.describe();
}

}  // namespace
}  // namespace stoke::gpu
