// What only the simulated CUDA runtime can show (label cpu): that it is asynchronous the way a GPU
// is (else it would hide the bugs it is for), and how stoke's CUDA stages behave when a stage body
// throws, when the device faults, and whether they give every buffer back.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <future>
#include <sstream>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "../device_stages_test_support.hpp"
#include "fake_cudart.hpp"
#include "stoke/gpu/convert.hpp"
#include "stoke/gpu/device.hpp"
#include "stoke/gpu/error.hpp"
#include "stoke/gpu/event.hpp"
#include "stoke/gpu/memory.hpp"
#include "stoke/gpu/pinned_allocator.hpp"
#include "stoke/gpu/synthetic.hpp"
#include "stoke/graph/errors.hpp"

namespace stoke::gpu::test {
namespace {

using namespace std::chrono_literals;

const Device gpu0 = Device::cuda(0);

class Runtime : public ::testing::Test {
 protected:
  void TearDown() override { sim::reset_device(); }
};

using Stages = Runtime;

/// Holds a stream at a point until opened: what is enqueued after it has certainly not run.
class Gate {
 public:
  explicit Gate(StreamView stream) {
    STOKE_CUDA_CHECK(sim::enqueue(stream.native(), [opened = opened_.get_future().share()] { opened.wait(); }));
  }
  void open() { opened_.set_value(); }

 private:
  std::promise<void> opened_;
};

// ---- the CPU fallback's one line ---------------------------------------------------------------

/// What select_device("auto") logs when it falls back to the CPU.
std::string fallback_line() {
  std::ostringstream log;
  EXPECT_EQ(select_device("auto", &log), Device::cpu());
  return log.str();
}

TEST_F(Runtime, TheCpuFallbackSaysNoGpuWhenThereIsNoDriver) {
  sim::set_driver_version(0);
  EXPECT_EQ(fallback_line(),
            "stoke: no GPU: no NVIDIA driver is installed (libcuda.so.1 was not found); running on the CPU\n");
}

TEST_F(Runtime, TheCpuFallbackSaysTheDriverIsTooOldAndWhichVersionsMeet) {
  sim::set_driver_version(12040);
  const std::string line = fallback_line();
  EXPECT_EQ(line,
            "stoke: the NVIDIA driver is too old: it supports CUDA up to 12.4, and this stoke was built with CUDA " +
                std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) +
                " (update the driver); running on the CPU\n");
  EXPECT_EQ(line.find("no GPU"), std::string::npos) << "an old driver is not a missing GPU";
}

TEST_F(Runtime, WithADriverOfItsOwnVersionTheDeviceIsUsed) {
  EXPECT_EQ(select_device("auto"), gpu0);
  EXPECT_EQ(cuda_unavailable_reason(), "");
}

// ---- the simulator itself ------------------------------------------------------------------------

TEST_F(Runtime, CopiesMoveTheirBytesWhenTheStreamGetsThere) {
  const Stream stream(gpu0);
  const PinnedBuffer host(64);
  std::memset(host.data(), 1, host.size());
  const DeviceBuffer device(gpu0, host.size());
  Gate gate(stream);
  fill_async(device.data(), 2, device.size(), stream);
  copy_async(host.data(), device.data(), host.size(), stream);
  EXPECT_FALSE(stream.ready());
  EXPECT_EQ(host.data()[0], std::byte{1}) << "the copy ran during the call, as no GPU does";
  gate.open();
  stream.synchronize();
  EXPECT_TRUE(stream.ready());
  EXPECT_EQ(host.data()[0], std::byte{2});
  EXPECT_EQ(host.data()[63], std::byte{2});
}

TEST_F(Runtime, EventsOrderStreamsAndTimeWhatRanBetweenThem) {
  const Stream first(gpu0);
  const Stream second(gpu0);
  Event start(gpu0, {.timing = true});
  Event end(gpu0, {.timing = true});
  EXPECT_TRUE(end.ready()) << "an event never recorded counts as complete";
  EXPECT_THROW(Event::elapsed(start, end), CudaError) << "CUDA refuses to time events never recorded";

  Gate gate(first);
  start.record(first);
  synthetic_work(first, 20ms);
  Event first_done(gpu0);
  first_done.record(first);
  second.wait(first_done);  // the host does not wait; `second` does
  end.record(second);
  EXPECT_FALSE(end.ready()) << "`second` did not wait for `first`";
  EXPECT_THROW(Event::elapsed(start, end), CudaError) << "CUDA refuses to time an event not yet complete";
  gate.open();
  end.synchronize();
  EXPECT_TRUE(first_done.ready());
  EXPECT_GE(Event::elapsed(start, end).count(), 20.0);

  Event untimed(gpu0);
  untimed.record(second);
  untimed.synchronize();
  EXPECT_THROW(Event::elapsed(start, untimed), CudaError) << "an event made without timing cannot be timed";
}

TEST_F(Runtime, AKernelGivenHostMemoryIsRefused) {
  const Stream stream(gpu0);
  std::vector<std::uint8_t> host(3 * 4 * 4);
  const DeviceBuffer out(gpu0, host.size() * sizeof(float));
  EXPECT_THROW(convert_u8(host.data(), out.data(), 1, 4, 4, 3, {}, stream), CudaError);
}

// The element-wise kernel's launcher (16-bit input, more than 3 channels) computes what the host
// does, on the stream, asynchronously; the uint8 table launcher still takes 1 to 3 channels.
TEST_F(Runtime, ConvertingAnyInputOnAStreamMatchesTheHost) {
  const Stream stream(gpu0);
  const std::size_t n = 2;
  const int height = 3;
  const int width = 5;
  for (const int channels : {1, 3, 4, 7}) {
    for (const DType input : {DType::u8, DType::u16}) {
      const ConvertOptions options{.mean = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f}, .stddev = {0.3f}};
      const std::size_t elements = n * static_cast<std::size_t>(height * width * channels);
      PinnedBuffer host_in(elements * element_size(input));
      for (std::size_t i = 0; i < host_in.size(); ++i) host_in.data()[i] = static_cast<std::byte>(i * 37 % 251);
      const DeviceBuffer in(gpu0, host_in.size());
      const DeviceBuffer out(gpu0, elements * sizeof(float));
      PinnedBuffer host_out(out.size());
      Gate gate(stream);
      copy_async(in.data(), host_in.data(), host_in.size(), stream);
      convert(in.data(), input, out.data(), n, height, width, channels, options, stream);
      copy_async(host_out.data(), out.data(), out.size(), stream);
      gate.open();
      stream.synchronize();
      std::vector<float> expected(elements);
      convert(host_in.data(), input, expected.data(), n, height, width, channels, options, StreamView::host());
      EXPECT_EQ(std::memcmp(host_out.data(), expected.data(), out.size()), 0)
          << channels << " channels of " << to_string(input);
    }
  }
}

// ---- stoke's stages on it ------------------------------------------------------------------------

const nodes::BatchShape small_shape{.batch_size = 4, .height = 16, .width = 16, .channels = 3};

TEST_F(Stages, AThrowingComputeBodyFailsTheRunAndEveryBufferComesBack) {
  // With one device slot, batches are also waiting for a slot inside the to-device stage.
  for (const std::size_t slots : {std::size_t{1}, std::size_t{3}}) {
    const std::size_t device_before = sim::device_bytes_in_use();
    nodes::BatchPool pool(small_shape, 4, batch_allocator(gpu0));
    {
      ToDevice to_device(gpu0, pool.shape(), {.slots = slots});
      Compute compute(gpu0,
                      [](DeviceBatch& batch, StreamView stream) {
                        synthetic_work(stream, 200us);
                        if (batch.sequence() == 5) throw std::runtime_error("batch 5 is bad");
                      },
                      {.streams = 2, .convert = ConvertOptions{}});
      try {
        run_device_pipeline(PatternSource(pool, 40), to_device, compute, [](Computed<std::monostate>) {});
        ADD_FAILURE() << "the run succeeded though a compute body threw";
      } catch (const graph::StageError& error) {
        EXPECT_EQ(error.stage(), "compute");
        EXPECT_NE(std::string(error.what()).find("batch 5 is bad"), std::string::npos) << error.what();
      }
    }
    EXPECT_EQ(pool.stats().free, 4u) << "a host batch was not given back (" << slots << " device slots)";
    EXPECT_EQ(sim::device_bytes_in_use(), device_before) << "device memory was not freed (" << slots << " slots)";
  }
}

TEST_F(Stages, ADeviceFaultFailsTheRunInsteadOfHanging) {
  nodes::BatchPool pool(small_shape, 4, batch_allocator(gpu0));
  ToDevice to_device(gpu0, pool.shape(), {.slots = 3});
  Compute compute(gpu0,
                  [](DeviceBatch& batch, StreamView stream) {
                    synthetic_work(stream, 200us);
                    // A kernel of batch 6 faults: from when the GPU gets there, every call fails.
                    if (batch.sequence() == 6)
                      STOKE_CUDA_CHECK(sim::fail_device(stream.native(), cudaErrorIllegalAddress));
                  },
                  {.streams = 2});
  try {
    run_device_pipeline(PatternSource(pool, 40), to_device, compute, [](Computed<std::monostate>) {});
    FAIL() << "the run succeeded on a failed device";
  } catch (const graph::StageError& error) {
    try {
      std::rethrow_exception(error.cause());
    } catch (const CudaError& cause) {
      EXPECT_EQ(cause.code(), cudaErrorIllegalAddress) << cause.what();
    } catch (...) {
      ADD_FAILURE() << "the run failed with something else than the device's error: " << error.what();
    }
  }
}

TEST_F(Stages, AStageBodyThatSynchronizesCountsAsAPipelineThreadWait) {
  nodes::BatchPool pool(small_shape, 2, batch_allocator(gpu0));
  ToDevice to_device(gpu0, pool.shape(), {.slots = 2});
  Compute compute(gpu0, [](DeviceBatch&, StreamView stream) { stream.synchronize(); });
  const std::uint64_t before = host_waits_on_pipeline_threads();
  run_device_pipeline(PatternSource(pool, 5), to_device, compute, [](Computed<std::monostate>) {});
  EXPECT_EQ(host_waits_on_pipeline_threads(), before + 5);
}

}  // namespace
}  // namespace stoke::gpu::test
