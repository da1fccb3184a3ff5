// Devices without a GPU: parsing and selecting devices, the CPU fallback and its log line, the
// reason CUDA is unusable, device facts, the GPU errors' messages, the allocator for batches, and
// what the CUDA-only classes do when there is no CUDA (both builds; label cpu).
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <numeric>
#include <sstream>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/error.hpp>
#include <stoke/gpu/event.hpp>
#include <stoke/gpu/handles.hpp>
#include <stoke/gpu/memory.hpp>
#include <stoke/gpu/pinned_allocator.hpp>
#include <stoke/gpu/stream.hpp>
#include <stoke/nodes/allocator.hpp>
#include <stoke/nodes/batch_pool.hpp>
#include <string>
#include <vector>

namespace stoke::gpu {
namespace {

/// The message of the exception `statement` throws as `Exception` ("" and a failure if none).
template <class Exception, class Statement>
std::string message_of(Statement statement) {
  try {
    statement();
  } catch (const Exception& error) {
    return error.what();
  }
  ADD_FAILURE() << "no exception was thrown";
  return {};
}

bool no_usable_gpu() { return cuda_device_count() == 0; }

// ---- parse_device and Device::str

TEST(ParseDevice, ReadsCpuCudaAndCudaN) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:0"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  EXPECT_EQ(parse_device("cuda:12"), Device::cuda(12));
  EXPECT_TRUE(parse_device("cpu").is_cpu());
  EXPECT_EQ(parse_device("cpu").ordinal(), -1);
  EXPECT_EQ(parse_device("cuda:3").ordinal(), 3);
}

TEST(ParseDevice, RejectsOtherSpellingsNamingTheSpec) {
  for (const std::string spec : {"gpu", "CPU", "Cuda", " cpu", "cpu ", "", "cuda:", "cuda:-1", "cuda:+1", "cuda:x",
                                 "cuda:1x", "cuda0", "cuda:99999999999"}) {
    const std::string message = message_of<DeviceError>([&] { parse_device(spec); });
    EXPECT_NE(message.find("invalid device '" + spec + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("expected cpu, cuda, cuda:N or auto"), std::string::npos) << message;
  }
  EXPECT_EQ(message_of<DeviceError>([] { parse_device("gpu"); }),
            "invalid device 'gpu': expected cpu, cuda, cuda:N or auto");
}

TEST(ParseDevice, SaysAutoIsForSelectDevice) {
  const std::string message = message_of<DeviceError>([] { parse_device("auto"); });
  EXPECT_NE(message.find("select_device"), std::string::npos) << message;
}

TEST(Device, StrRoundTripsThroughParseDevice) {
  for (const Device device : {Device::cpu(), Device::cuda(0), Device::cuda(1), Device::cuda(15)})
    EXPECT_EQ(parse_device(device.str()), device) << device.str();
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(Device::cuda(2).str(), "cuda:2");
  std::ostringstream out;
  out << Device::cuda(4) << " " << Device();
  EXPECT_EQ(out.str(), "cuda:4 cpu");
}

// ---- select_device and the reason CUDA is unusable

TEST(SelectDevice, CpuIsTheCpuWithOneLineSayingSo) {
  std::ostringstream log;
  EXPECT_EQ(select_device("cpu", &log), Device::cpu());
  EXPECT_EQ(log.str(), "stoke: running on the CPU, as asked (--device cpu)\n");
}

TEST(SelectDevice, AutoFallsBackToTheCpuWithOneLineSayingWhy) {
  std::ostringstream log;
  const Device device = select_device("auto", &log);
  if (!no_usable_gpu()) {
    EXPECT_EQ(device, Device::cuda(0));
    EXPECT_EQ(log.str(), "");
    return;
  }
  EXPECT_EQ(device, Device::cpu());
  const std::string line = log.str();
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "exactly one line: " << line;
  EXPECT_NE(line.find(cuda_unavailable_reason()), std::string::npos) << line;
  EXPECT_NE(line.find("running on the CPU"), std::string::npos) << line;
  EXPECT_EQ(select_device("auto"), Device::cpu()) << "a null log is allowed";
}

TEST(SelectDevice, MissingCudaDeviceThrowsNamingItAndWhy) {
  const int count = cuda_device_count();
  if (count > 7) GTEST_SKIP() << "this machine has cuda:7";
  const std::string message = message_of<DeviceError>([] { select_device("cuda:7"); });
  EXPECT_NE(message.find("cuda:7"), std::string::npos) << message;
  if (count == 0)
    EXPECT_NE(message.find(cuda_unavailable_reason()), std::string::npos) << message;
  else
    EXPECT_NE(message.find("does not exist: this machine has " + std::to_string(count) + " CUDA device"),
              std::string::npos)
        << message;
}

TEST(SelectDevice, BadSpecThrowsNamingIt) {
  const std::string message = message_of<DeviceError>([] { select_device("gpu:0"); });
  EXPECT_NE(message.find("'gpu:0'"), std::string::npos) << message;
}

TEST(CudaUnavailableReason, IsGivenExactlyWhenNoDeviceIsUsable) {
  if (no_usable_gpu()) {
    EXPECT_FALSE(cuda_unavailable_reason().empty());
  } else {
    EXPECT_EQ(cuda_unavailable_reason(), "");
  }
  if (!built_with_cuda()) {
    EXPECT_EQ(cuda_device_count(), 0);
    EXPECT_NE(cuda_unavailable_reason().find("built without CUDA"), std::string::npos) << cuda_unavailable_reason();
  }
}

// ---- device_info

TEST(DeviceInfo, DescribesTheCpu) {
  const DeviceInfo info = device_info(Device::cpu());
  EXPECT_EQ(info.device, Device::cpu());
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.multiprocessors, 0);
  EXPECT_GT(info.total_memory, std::size_t{0});
  const std::string line = info.describe();
  EXPECT_EQ(line.rfind("cpu " + info.name + " (" + std::to_string(info.multiprocessors) + " threads, ", 0), 0u) << line;
  EXPECT_NE(line.find(" GiB)"), std::string::npos) << line;
}

TEST(DeviceInfo, DescribesACudaDeviceOnOneLine) {
  DeviceInfo info;
  info.device = Device::cuda(0);
  info.name = "NVIDIA H200";
  info.total_memory = 150'105'522'176;  // 139.8 GiB
  info.compute_major = 9;
  info.compute_minor = 0;
  info.multiprocessors = 132;
  EXPECT_EQ(info.describe(), "cuda:0 NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)");
}

TEST(DeviceInfo, MissingCudaDeviceThrowsDeviceError) {
  const int count = cuda_device_count();
  const std::string message = message_of<DeviceError>([&] { device_info(Device::cuda(count)); });
  EXPECT_NE(message.find("cuda:" + std::to_string(count)), std::string::npos) << message;
}

// ---- errors

TEST(GpuCallError, MessageHasFileLineCallCodeNameAndText) {
  const CudaError error("CUDA", 1, "cudaErrorInvalidValue", "invalid argument",
                        "cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream)", "/elsewhere/copy.cpp", 42);
  EXPECT_STREQ(error.what(),
               "/elsewhere/copy.cpp:42: cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream) failed: "
               "cudaErrorInvalidValue (invalid argument)");
  EXPECT_EQ(error.library(), "CUDA");
  EXPECT_EQ(error.code(), 1);
  EXPECT_EQ(error.code_name(), "cudaErrorInvalidValue");
  EXPECT_EQ(error.text(), "invalid argument");
  EXPECT_EQ(error.call(), "cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream)");
  EXPECT_EQ(error.file(), "/elsewhere/copy.cpp");
  EXPECT_EQ(error.line(), 42);
}

TEST(GpuCallError, NamesStokesOwnFilesByTheirPathInTheSourceTree) {
  const int line = __LINE__;
  const CublasError error("cuBLAS", 7, "CUBLAS_STATUS_INVALID_VALUE", "an invalid value was used as an argument",
                          "cublasSgemm(...)", __FILE__, line);
  const std::string expected = "tests/gpu/device_test.cpp:" + std::to_string(line) +
                               ": cublasSgemm(...) failed: CUBLAS_STATUS_INVALID_VALUE (an invalid value was used as "
                               "an argument)";
  EXPECT_EQ(error.what(), expected);
  EXPECT_EQ(error.file(), __FILE__) << "file() keeps the path as given";
}

TEST(GpuCallError, ContextLeadsTheMessage) {
  const CudaOutOfMemory error("CUDA", 2, "cudaErrorMemoryAllocation", "out of memory", "cudaMalloc(&block, bytes)",
                              "/x/memory.cpp", 9,
                              "cuda:0: out of memory allocating 1.5 GiB (free 0.8 GiB of 139.8 GiB)");
  EXPECT_STREQ(error.what(),
               "cuda:0: out of memory allocating 1.5 GiB (free 0.8 GiB of 139.8 GiB); /x/memory.cpp:9: "
               "cudaMalloc(&block, bytes) failed: cudaErrorMemoryAllocation (out of memory)");
  // Out of memory is a CUDA error is a failed call is a GPU error.
  const CudaError& as_cuda = error;
  const GpuCallError& as_call = error;
  const GpuError& as_gpu = error;
  EXPECT_EQ(as_cuda.code(), 2);
  EXPECT_EQ(as_call.library(), "CUDA");
  EXPECT_STREQ(as_gpu.what(), error.what());
}

// ---- allocators for batches

TEST(BatchAllocator, IsTheHostAllocatorForTheCpu) {
  EXPECT_EQ(batch_allocator(Device::cpu()), nodes::host_allocator());
  EXPECT_EQ(batch_allocator(Device::cpu())->name(), "host");
}

TEST(PinnedAllocator, NeedsAUsableGpu) {
  if (!no_usable_gpu()) GTEST_SKIP() << "a GPU is usable here (cuda_runtime_test covers pinned memory)";
  const nodes::BatchShape shape{.batch_size = 2, .height = 4, .width = 4, .channels = 3};
  // Without CUDA pinned_allocator() itself throws; with CUDA but no device, the first allocation.
  EXPECT_THROW(nodes::BatchPool(shape, 2, pinned_allocator()), DeviceError);
  EXPECT_THROW(nodes::BatchPool(shape, 2, batch_allocator(Device::cuda(0))), DeviceError);
}

// ---- the host stream, and the CUDA-only classes without a usable GPU

TEST(HostStream, CopiesAndFillsAtOnce) {
  const StreamView host = StreamView::host();
  EXPECT_TRUE(host.is_host());
  EXPECT_EQ(host.native(), nullptr);
  std::vector<int> src(100);
  std::iota(src.begin(), src.end(), 1);
  std::vector<int> dst(100, 0);
  copy_async(dst.data(), src.data(), src.size() * sizeof(int), host);
  EXPECT_EQ(dst, src);
  std::array<unsigned char, 16> bytes{};
  fill_async(bytes.data() + 4, 0xAB, 8, host);
  for (std::size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(bytes[i], (i >= 4 && i < 12) ? 0xAB : 0) << i;
  copy_async(nullptr, nullptr, 0, host);  // nothing to copy: no pointer is touched
  host.synchronize();
  EXPECT_TRUE(host.ready());
}

TEST(CudaOnlyClasses, RefuseTheCpuDevice) {
  EXPECT_THROW(Stream{Device::cpu()}, DeviceError);
  EXPECT_THROW(Event{Device::cpu()}, DeviceError);
  EXPECT_THROW((DeviceBuffer{Device::cpu(), 64}), DeviceError);
  EXPECT_THROW(CublasHandle{StreamView::host()}, DeviceError);
  EXPECT_THROW(CudnnHandle{StreamView::host()}, DeviceError);
  EXPECT_THROW(memory_info(Device::cpu()), DeviceError);
}

TEST(CudaOnlyClasses, ThrowDeviceErrorWithoutAUsableGpu) {
  if (!no_usable_gpu()) GTEST_SKIP() << "a GPU is usable here";
  const std::string reason = built_with_cuda() ? cuda_unavailable_reason() : "built without CUDA";
  for (const std::string& message : {
           message_of<DeviceError>([] { Stream stream(Device::cuda(0)); }),
           message_of<DeviceError>([] { Event event(Device::cuda(0)); }),
           message_of<DeviceError>([] { DeviceBuffer buffer(Device::cuda(0), 64); }),
           message_of<DeviceError>([] { PinnedBuffer buffer(64); }),
           message_of<DeviceError>([] { memory_info(Device::cuda(0)); }),
       })
    EXPECT_NE(message.find(reason), std::string::npos) << message;
  EXPECT_THROW(DeviceGuard{Device::cuda(0)}, DeviceError);
  const DeviceGuard cpu_guard(Device::cpu());  // the CPU needs no device switch
}

TEST(CudaOnlyClasses, SayTheBuildHasNoCuda) {
  if (built_with_cuda()) GTEST_SKIP() << "this stoke was built with CUDA";
  const std::string message = message_of<DeviceError>([] { Stream stream(Device::cuda(0)); });
  EXPECT_NE(message.find("a Stream needs a CUDA device, but this stoke was built without CUDA"), std::string::npos)
      << message;
  EXPECT_NE(message.find("-DSTOKE_CUDA=ON"), std::string::npos) << message;
  const StreamView gpu_view(Device::cuda(0), nullptr);
  std::array<std::byte, 4> bytes{};
  EXPECT_THROW(copy_async(bytes.data(), bytes.data(), bytes.size(), gpu_view), DeviceError);
  EXPECT_THROW(gpu_view.synchronize(), DeviceError);
  EXPECT_THROW(CublasHandle{gpu_view}, DeviceError);
  EXPECT_THROW(CudnnHandle{gpu_view}, DeviceError);
  EXPECT_THROW(pinned_allocator(), DeviceError);
  // Empty buffers need no CUDA.
  EXPECT_EQ(PinnedBuffer(0).data(), nullptr);
  EXPECT_TRUE(DeviceBuffer().empty());
}

}  // namespace
}  // namespace stoke::gpu
