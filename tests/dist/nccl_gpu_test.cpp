// The real NCCL on one GPU, one rank (label gpu): the communicator joins by both rendezvous, a sum
// and a broadcast over one rank leave device memory as it was, and nccl_transport's packed and
// in-place buckets come back unchanged, ordered on the compute stream. Skips without a CUDA device
// or without NCCL (libnccl.so.2 on the library path, or STOKE_NCCL_LIBRARY).
#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <cstddef>
#include <filesystem>
#include <stoke/dist/communicator.hpp>
#include <stoke/dist/nccl.hpp>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/memory.hpp>
#include <stoke/gpu/stream.hpp>
#include <stoke/nn/tensor.hpp>
#include <string>
#include <vector>

namespace stoke::dist {
namespace {

class NcclOnOneGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << gpu::cuda_unavailable_reason();
    std::string why;
    if (!nccl_available(&why)) GTEST_SKIP() << why;
  }
  const gpu::Device device_ = gpu::Device::cuda(0);
};

std::vector<float> pattern(std::size_t count) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<float>(i % 1000) * 0.25f - 17.0f;
  return values;
}

TEST_F(NcclOnOneGpu, SumAndBroadcastOverOneRankLeaveTheDataUnchanged) {
  NcclCommunicator nccl(*make_local_communicator(), device_);
  EXPECT_EQ(nccl.world(), 1);
  EXPECT_TRUE(nccl.describe().starts_with("nccl 2.")) << nccl.describe();
  const gpu::Stream stream(device_);
  const std::vector<float> values = pattern(std::size_t{1} << 20);
  const std::size_t bytes = values.size() * sizeof(float);
  const gpu::DeviceBuffer data(device_, bytes);
  gpu::copy_async(data.data(), values.data(), bytes, stream);
  nccl.all_reduce_sum(data.as<float>(), values.size(), stream);
  nccl.broadcast(data.data(), bytes, 0, stream);
  std::vector<float> back(values.size());
  gpu::copy_async(back.data(), data.data(), bytes, stream);
  stream.synchronize();
  EXPECT_EQ(back, values);
  nccl.check();
}

TEST_F(NcclOnOneGpu, TheFileRendezvousJoinsToo) {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / ("stoke-nccl-gpu-test-" + std::to_string(::getpid()));
  {
    NcclCommunicator nccl(folder, 0, 1, device_);
    EXPECT_EQ(nccl.rank(), 0);
    nccl.check();
  }
  EXPECT_EQ(std::filesystem::file_size(folder / nccl_unique_id_file), 128u);
  std::filesystem::remove_all(folder);
}

TEST_F(NcclOnOneGpu, TransportReturnsEachBucketUnchangedOnTheComputeStream) {
  NcclCommunicator nccl(*make_local_communicator(), device_);
  const gpu::Stream compute(device_);
  const std::unique_ptr<BucketTransport> transport = nccl_transport(nccl, compute.view());
  // Bucket 0 is packed (three tensors), bucket 1 summed in place (one).
  const std::vector<nn::Shape> shapes{{64, 3, 3, 3}, {64}, {1000, 512}, {1000}};
  std::vector<nn::Tensor> gradients;
  std::vector<std::vector<float>> values;
  for (const nn::Shape& shape : shapes) {
    values.push_back(pattern(static_cast<std::size_t>(nn::element_count(shape))));
    gradients.emplace_back(shape, nn::DType::f32, device_);
    gradients.back().copy_from(nn::Tensor::from_values(shape, values.back()), compute);
  }
  const std::vector<nn::Tensor> bucket0{gradients[0], gradients[1], gradients[3]};
  const std::vector<nn::Tensor> bucket1{gradients[2]};
  for (int sync = 0; sync < 3; ++sync) {
    transport->start(0, bucket0);
    transport->start(1, bucket1);
    transport->finish();
  }
  for (std::size_t i = 0; i < gradients.size(); ++i) EXPECT_EQ(gradients[i].to_vector(compute), values[i]) << i;
  const TransportStats stats = transport->stats();
  EXPECT_EQ(stats.syncs, 3);
  EXPECT_EQ(stats.buckets, 6);
}

}  // namespace
}  // namespace stoke::dist
