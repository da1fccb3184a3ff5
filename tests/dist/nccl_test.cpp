// stoke's NCCL layer without NCCL: a missing library is named with STOKE_NCCL_LIBRARY and where
// NCCL is found; with a stand-in NCCL of one rank (fake_nccl/fake_nccl.cpp, loaded through
// STOKE_NCCL_LIBRARY) the loader resolves, the file rendezvous hands rank 0's id to the others or
// times out naming its file. The tests that need a CUDA device skip without one; built on the
// simulated CUDA runtime (nccl_sim_test, STOKE_TEST_SIM) they run: a communicator of one rank,
// NCCL's refusal of a world of 2 in the exception, asynchronous errors, and nccl_transport's
// packing and stream order, with the fake's sum run on the simulated streams.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <stoke/dist/communicator.hpp>
#include <stoke/dist/nccl.hpp>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/memory.hpp>
#include <stoke/gpu/stream.hpp>
#include <stoke/nn/tensor.hpp>
#include <string>
#include <thread>
#include <vector>

#include "scoped_environment.hpp"
#if STOKE_TEST_SIM
#include "fake_cudart.hpp"
#endif

namespace stoke::dist {
namespace {

#if STOKE_TEST_SIM
constexpr bool simulated = true;
#else
constexpr bool simulated = false;
#endif

using namespace std::chrono_literals;
namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

#define EXPECT_CONTAINS(text, fragment) \
  EXPECT_TRUE(contains((text), (fragment))) << "'" << (text) << "' does not mention '" << (fragment) << "'"

// The message of what `f` throws as `Exception` (a failure, and empty, when it throws nothing).
template <class Exception, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const Exception& error) {
    return error.what();
  }
  ADD_FAILURE() << "no exception";
  return {};
}

using stoke::test::ScopedEnvironment;

// An empty folder of this test's own under the temporary directory, removed after.
class TemporaryFolder {
 public:
  TemporaryFolder() {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("stoke-nccl-test-" + std::to_string(::getpid()) + "-" + test->test_suite_name() + "-" + test->name());
    fs::remove_all(path_);
  }
  ~TemporaryFolder() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;
  const fs::path& path() const noexcept { return path_; }

 private:
  fs::path path_;
};

// The stand-in's test-only extensions (fake_nccl.cpp), from the copy the loader has loaded.
class FakeNccl {
 public:
  using EnqueueHook = int (*)(void* stream, void (*work)(void*), void* argument);
  FakeNccl() : handle_(dlopen(STOKE_TEST_FAKE_NCCL, RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ == nullptr) throw std::runtime_error(std::string("cannot load the fake NCCL: ") + dlerror());
  }
  ~FakeNccl() {
    set_sum_factor(1);
    set_enqueue(nullptr);
    set_async_error(0);
    dlclose(handle_);
  }
  FakeNccl(const FakeNccl&) = delete;
  FakeNccl& operator=(const FakeNccl&) = delete;

  void set_sum_factor(float factor) { get<void (*)(float)>("fake_nccl_set_sum_factor")(factor); }
  void set_enqueue(EnqueueHook hook) { get<void (*)(EnqueueHook)>("fake_nccl_set_enqueue")(hook); }
  void set_async_error(int error) { get<void (*)(int)>("fake_nccl_set_async_error")(error); }
  int all_reduces() { return get<int (*)()>("fake_nccl_all_reduces")(); }
  std::size_t last_count() { return get<std::size_t (*)()>("fake_nccl_last_count")(); }
  int live_comms() { return get<int (*)()>("fake_nccl_live_comms")(); }
  int aborts() { return get<int (*)()>("fake_nccl_aborts")(); }

 private:
  template <class Function>
  Function get(const char* name) {
    void* symbol = dlsym(handle_, name);
    if (symbol == nullptr) throw std::runtime_error(std::string("the fake NCCL has no ") + name);
    return reinterpret_cast<Function>(symbol);
  }
  void* handle_;
};

// The tests that load the stand-in.
class NcclWithFake : public ::testing::Test {
 protected:
  ScopedEnvironment library_{"STOKE_NCCL_LIBRARY", STOKE_TEST_FAKE_NCCL};
  FakeNccl fake_;
};
class NcclRendezvous : public NcclWithFake {};

// ---- the loader

TEST(NcclLibrary, AMissingLibraryIsNamedWithTheVariableAndWhereNcclIs) {
  const std::string missing = "/nonexistent/stoke-test/libnccl-missing.so.2";
  ScopedEnvironment library("STOKE_NCCL_LIBRARY", missing);
  std::string why;
  EXPECT_FALSE(nccl_available(&why));
  EXPECT_CONTAINS(why, missing);
  EXPECT_CONTAINS(why, "not found");
  EXPECT_CONTAINS(why, "STOKE_NCCL_LIBRARY");
  EXPECT_CONTAINS(why, "libnccl.so.2");
  EXPECT_CONTAINS(why, "nvidia/nccl/lib");
  // Everything that needs NCCL says the same.
  EXPECT_EQ(message_of<std::runtime_error>([] { nccl_version(); }), why);
  TemporaryFolder folder;
  EXPECT_EQ(message_of<std::runtime_error>([&] { rendezvous_unique_id(folder.path(), 0); }), why);
  EXPECT_FALSE(fs::exists(folder.path() / nccl_unique_id_file));
  if (gpu::built_with_cuda()) {  // checked before the device is touched: no GPU needed
    EXPECT_EQ(message_of<std::runtime_error>([] { NcclCommunicator(NcclUniqueId{}, 0, 1, gpu::Device::cuda(0)); }),
              why);
  }
}

TEST(NcclLibrary, WithoutTheVariableTheDefaultLibraryIsLoadedFromTheLibraryPath) {
  ScopedEnvironment library("STOKE_NCCL_LIBRARY", "");
  std::string why;
  if (void* real = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL)) {  // this machine has NCCL
    dlclose(real);
    EXPECT_TRUE(nccl_available(&why)) << why;
    EXPECT_TRUE(nccl_version().starts_with("2.")) << nccl_version();
    return;
  }
  EXPECT_FALSE(nccl_available(&why));
  EXPECT_CONTAINS(why, "libnccl.so.2 not found");
  EXPECT_CONTAINS(why, "LD_LIBRARY_PATH");
  EXPECT_CONTAINS(why, "nvidia/nccl/lib");
  EXPECT_CONTAINS(why, "scripts/run-on-device.sh");
  EXPECT_CONTAINS(why, "STOKE_NCCL_LIBRARY");
}

TEST(NcclLibrary, ALibraryWithoutNcclsFunctionsIsRefusedNamingOne) {
  ScopedEnvironment library("STOKE_NCCL_LIBRARY", "libm.so.6");
  std::string why;
  EXPECT_FALSE(nccl_available(&why));
  EXPECT_CONTAINS(why, "libm.so.6 is not a usable NCCL");
  EXPECT_CONTAINS(why, "ncclGetVersion is missing");
}

TEST_F(NcclWithFake, TheLoaderResolvesEveryFunction) {
  std::string why = "not cleared";
  EXPECT_TRUE(nccl_available(&why));
  EXPECT_EQ(why, "");
  EXPECT_EQ(nccl_version(), "2.21.5");
}

// ---- the file rendezvous

TEST_F(NcclRendezvous, HandsRankZerosIdToTheOtherRanks) {
  TemporaryFolder folder;
  const fs::path nested = folder.path() / "job-7";  // rank 0 creates the folder
  // Rank 1 looks before rank 0 has written anything.
  auto early = std::async(std::launch::async, [&] { return rendezvous_unique_id(nested, 1, 10s); });
  std::this_thread::sleep_for(50ms);
  const NcclUniqueId id = rendezvous_unique_id(nested, 0);
  EXPECT_EQ(early.get(), id);
  EXPECT_EQ(rendezvous_unique_id(nested, 2, 1s), id);                           // and one that comes later
  EXPECT_EQ(std::memcmp(id.bytes.data(), "stoke fake NCCL unique id", 25), 0);  // the library's id

  // The folder holds the id under its name, whole, and no temporary file.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(nested)) names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{nccl_unique_id_file});
  EXPECT_EQ(fs::file_size(nested / nccl_unique_id_file), id.bytes.size());
}

TEST_F(NcclRendezvous, TakesNoPartialId) {
  TemporaryFolder folder;
  fs::create_directories(folder.path());
  std::ofstream(folder.path() / nccl_unique_id_file, std::ios::binary) << "0123456789";  // 10 of 128 bytes
  const std::string message = message_of<std::runtime_error>([&] { rendezvous_unique_id(folder.path(), 1, 200ms); });
  EXPECT_CONTAINS(message, (folder.path() / nccl_unique_id_file).string());
  EXPECT_CONTAINS(message, "held 10 bytes, not the 128");
}

TEST_F(NcclRendezvous, AnIdThatNeverAppearsTimesOutNamingTheFile) {
  TemporaryFolder folder;
  const auto start = std::chrono::steady_clock::now();
  const std::string message = message_of<std::runtime_error>([&] { rendezvous_unique_id(folder.path(), 3, 300ms); });
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 300ms);
  EXPECT_LT(waited, 300ms + 2s);
  EXPECT_CONTAINS(message, "rank 3");
  EXPECT_CONTAINS(message, (folder.path() / nccl_unique_id_file).string());
  EXPECT_CONTAINS(message, "within 300 ms");
  EXPECT_CONTAINS(message, "rank 0 writes it");
}

// ---- NcclCommunicator

TEST_F(NcclWithFake, ACommunicatorNeedsACudaDevice) {
  if (!gpu::built_with_cuda()) {
    EXPECT_CONTAINS(message_of<gpu::DeviceError>([] { NcclCommunicator(NcclUniqueId{}, 0, 1, gpu::Device::cuda(0)); }),
                    "this stoke was built without CUDA");
    return;
  }
  const std::string message =
      message_of<gpu::DeviceError>([] { NcclCommunicator(NcclUniqueId{}, 0, 1, gpu::Device::cpu()); });
  EXPECT_CONTAINS(message, "needs a CUDA device, not cpu");
  EXPECT_CONTAINS(message, "host_transport");
  EXPECT_CONTAINS(
      message_of<std::invalid_argument>([] { NcclCommunicator(NcclUniqueId{}, 2, 2, gpu::Device::cuda(0)); }),
      "rank 2 of a world of 2");
  EXPECT_EQ(fake_.live_comms(), 0);
}

// The tests below make a communicator on cuda:0: the simulated one in nccl_sim_test.
class NcclOnDevice : public NcclWithFake {
 protected:
  void SetUp() override {
    if (gpu::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << gpu::cuda_unavailable_reason();
  }
  const gpu::Device device_ = gpu::Device::cuda(0);
};

TEST_F(NcclOnDevice, NcclsRefusalOfAWorldOfTwoIsInTheException) {
  TemporaryFolder folder;
  int code = 0;
  const std::string message = message_of<NcclError>([&] {
    try {
      NcclCommunicator(folder.path(), 0, 2, device_);
    } catch (const NcclError& error) {
      code = error.code();
      throw;
    }
  });
  EXPECT_EQ(code, 5);
  EXPECT_CONTAINS(message, "rank 0 of 2 on cuda:0 joining an NCCL communicator");
  EXPECT_CONTAINS(message, "dist/src/nccl.cpp:");
  EXPECT_CONTAINS(message, "ncclCommInitRank(&comm, world_, raw, rank_) failed: ncclInvalidUsage");
  EXPECT_CONTAINS(message, "invalid usage (fake NCCL: it has only rank 0 of a world of 1)");  // the library's text
  EXPECT_EQ(fake_.live_comms(), 0);
}

TEST_F(NcclOnDevice, CommunicatorsOfOneRankFromEveryRendezvous) {
  TemporaryFolder folder;
  const std::unique_ptr<Communicator> local = make_local_communicator();
  const int aborts = fake_.aborts();
  {
    NcclCommunicator over_mpi(*local, device_);
    NcclCommunicator over_files(folder.path(), 0, 1, device_);
    EXPECT_EQ(over_mpi.rank(), 0);
    EXPECT_EQ(over_files.world(), 1);
    EXPECT_EQ(over_mpi.device(), device_);
    EXPECT_EQ(over_mpi.describe(), "nccl 2.21.5, rank 0 of 1 on cuda:0");
    EXPECT_EQ(fake_.live_comms(), 2);
    over_mpi.check();
  }
  EXPECT_EQ(fake_.live_comms(), 0);  // destroyed, not aborted
  EXPECT_EQ(fake_.aborts(), aborts);
}

TEST_F(NcclOnDevice, SumAndBroadcastOverOneRankLeaveTheDataAsItIs) {
  NcclCommunicator nccl(*make_local_communicator(), device_);
  const gpu::Stream stream(device_);
  const std::vector<float> values{1.5f, -2.0f, 3.25f, 0.0f, 7.0f};
  const std::size_t bytes = values.size() * sizeof(float);
  const gpu::DeviceBuffer data(device_, bytes);
  gpu::copy_async(data.data(), values.data(), bytes, stream);
  const int before = fake_.all_reduces();
  nccl.all_reduce_sum(data.as<float>(), values.size(), stream);
  nccl.broadcast(data.data(), bytes, 0, stream);
  std::vector<float> back(values.size());
  gpu::copy_async(back.data(), data.data(), bytes, stream);
  stream.synchronize();
  EXPECT_EQ(back, values);
  EXPECT_EQ(fake_.all_reduces(), before + 1);
  EXPECT_EQ(fake_.last_count(), values.size());

  EXPECT_CONTAINS(message_of<std::invalid_argument>(
                      [&] { nccl.all_reduce_sum(data.as<float>(), values.size(), gpu::StreamView::host()); }),
                  "NCCL enqueues on a CUDA stream of cuda:0, not on one of cpu");
  EXPECT_CONTAINS(message_of<std::invalid_argument>([&] { nccl.broadcast(data.data(), bytes, 1, stream); }),
                  "broadcast from rank 1 in a world of 1");
}

TEST_F(NcclOnDevice, AFailedCommunicatorSaysSoAndIsAborted) {
  const int aborts = fake_.aborts();
  {
    NcclCommunicator nccl(*make_local_communicator(), device_);
    fake_.set_async_error(6);  // ncclRemoteError: a peer died
    const std::string message = message_of<NcclError>([&] { nccl.check(); });
    EXPECT_CONTAINS(message, "the NCCL communicator of rank 0 of 1 on cuda:0 failed");
    EXPECT_CONTAINS(message, "ncclRemoteError (remote process exited or there was a network error (fake NCCL))");
  }
  EXPECT_EQ(fake_.aborts(), aborts + 1);
  EXPECT_EQ(fake_.live_comms(), 0);
}

// ---- nccl_transport

class NcclTransportOnDevice : public NcclOnDevice {};

#if STOKE_TEST_SIM
// Runs the fake's sum as a kernel on the simulated stream, in the stream's order.
int enqueue_on_sim_stream(void* stream, void (*work)(void*), void* argument) {
  return gpu::sim::enqueue(static_cast<cudaStream_t>(stream), [=] { work(argument); });
}
#endif

TEST_F(NcclTransportOnDevice, SumsEachBucketAndOrdersTheComputeStreamAfterIt) {
  // On the simulator the fake's sum doubles (as two ranks with the same gradients would), on the
  // simulated stream; elsewhere (a real device's memory) it leaves the gradients as they are.
  const float factor = simulated ? 2.0f : 1.0f;
#if STOKE_TEST_SIM
  fake_.set_enqueue(enqueue_on_sim_stream);
  fake_.set_sum_factor(factor);
#endif
  NcclCommunicator nccl(*make_local_communicator(), device_);
  const gpu::Stream compute(device_);
  const std::unique_ptr<BucketTransport> transport = nccl_transport(nccl, compute.view());
  EXPECT_EQ(transport->world(), 1);

  const std::vector<nn::Tensor> bucket0{nn::Tensor::zeros({3}, nn::DType::f32, device_, compute),
                                        nn::Tensor::zeros({1, 5}, nn::DType::f32, device_, compute)};
  const std::vector<nn::Tensor> bucket1{nn::Tensor::zeros({2, 2}, nn::DType::f32, device_, compute)};
  const std::vector<std::vector<float>> values{{1, 2, 3}, {4, 5, 6, 7, 8}, {9, 10, 11, 12}};
  const std::vector<nn::Tensor> all{bucket0[0], bucket0[1], bucket1[0]};
  compute.synchronize();

  const int reduces = fake_.all_reduces();
  float scale = 1;
  for (int sync = 0; sync < 2; ++sync) {
#if STOKE_TEST_SIM
    // "backward" still writing the gradients when the buckets start: the transport must wait for it.
    EXPECT_EQ(gpu::sim::enqueue(compute.native(), [] { std::this_thread::sleep_for(20ms); }), cudaSuccess);
#endif
    if (sync == 0) {
      for (std::size_t i = 0; i < all.size(); ++i)
        all[i].copy_from(nn::Tensor::from_values(all[i].shape(), values[i]), compute);
    }
    transport->start(0, bucket0);
    transport->start(1, bucket1);
    transport->finish();
    scale *= factor;
    for (std::size_t i = 0; i < all.size(); ++i) {
      std::vector<float> expected = values[i];
      for (float& value : expected) value *= scale;
      EXPECT_EQ(all[i].to_vector(compute), expected) << "sync " << sync << ", tensor " << i;
    }
  }
  EXPECT_EQ(fake_.all_reduces(), reduces + 4);
  EXPECT_EQ(fake_.last_count(), 4u);  // bucket 1, summed in place
  const TransportStats stats = transport->stats();
  EXPECT_EQ(stats.syncs, 2);
  EXPECT_EQ(stats.buckets, 4);
  EXPECT_EQ(stats.bytes, 2 * 12 * 4);
  EXPECT_EQ(stats.exposed_seconds, 0.0);
}

TEST_F(NcclTransportOnDevice, RefusesWhatIsNotOnItsDevice) {
  NcclCommunicator nccl(*make_local_communicator(), device_);
  EXPECT_CONTAINS(message_of<std::invalid_argument>([&] { nccl_transport(nccl, gpu::StreamView::host()); }),
                  "the gradients are computed on cpu, but the NCCL communicator is on cuda:0");
  const gpu::Stream compute(device_);
  const std::unique_ptr<BucketTransport> transport = nccl_transport(nccl, compute.view());
  const std::vector<nn::Tensor> on_host{nn::Tensor({4})};
  EXPECT_CONTAINS(message_of<std::invalid_argument>([&] { transport->start(0, on_host); }),
                  "nccl_transport: bucket 0 holds f32[4] nchw cpu; NCCL sums f32 gradients on cuda:0");
}

}  // namespace
}  // namespace stoke::dist
