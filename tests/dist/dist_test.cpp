// stoke::dist in one process: the launcher's variables, the local communicator, the gradient
// sync's buckets (their order, and that they start during backward), the host transport, and
// the epoch shares ranks get. The multi-process checks are mpi_check.cpp's, under mpirun.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <stoke/dist/communicator.hpp>
#include <stoke/dist/gradient_sync.hpp>
#include <stoke/dist/launch.hpp>
#include <stoke/nn/models.hpp>
#include <stoke/nn/trainer.hpp>
#include <stoke/nodes/dataset.hpp>
#include <string>
#include <vector>

namespace {

using namespace stoke;

// Sets environment variables for a test's lifetime, unsetting the launchers' first.
class Environment {
 public:
  explicit Environment(std::vector<std::pair<std::string, std::string>> values) {
    for (const char* name : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                             "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "PMIX_SIZE"}) {
      if (const char* old = std::getenv(name)) saved_.emplace_back(name, old);
      unsetenv(name);
      set_.push_back(name);
    }
    for (const auto& [name, value] : values) setenv(name.c_str(), value.c_str(), 1);
  }
  ~Environment() {
    for (const std::string& name : set_) unsetenv(name.c_str());
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  std::vector<std::string> set_;
  std::vector<std::pair<std::string, std::string>> saved_;
};

TEST(DetectLaunch, WithoutALauncherTheProcessIsAlone) {
  const Environment env({});
  const dist::Launch launch = dist::detect_launch();
  EXPECT_FALSE(launch.launched());
  EXPECT_EQ(launch.world, 1);
  EXPECT_EQ(dist::connect()->world(), 1);
}

TEST(DetectLaunch, ReadsOpenMpisVariables) {
  const Environment env({{"OMPI_COMM_WORLD_RANK", "3"},
                         {"OMPI_COMM_WORLD_SIZE", "8"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  const dist::Launch launch = dist::detect_launch();
  EXPECT_EQ(launch.launcher, "mpirun");
  EXPECT_EQ(launch.rank, 3);
  EXPECT_EQ(launch.world, 8);
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_EQ(launch.local_world, 2);
}

TEST(DetectLaunch, ReadsPmix) {
  const Environment env({{"PMIX_RANK", "1"}, {"PMIX_SIZE", "4"}});
  const dist::Launch launch = dist::detect_launch();
  EXPECT_EQ(launch.launcher, "pmi");
  EXPECT_EQ(launch.rank, 1);
  EXPECT_EQ(launch.world, 4);
}

TEST(DetectLaunch, NamesABadVariable) {
  {
    const Environment env({{"OMPI_COMM_WORLD_RANK", "two"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
    try {
      dist::detect_launch();
      FAIL() << "no error";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("OMPI_COMM_WORLD_RANK"), std::string::npos) << e.what();
    }
  }
  const Environment env({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_THROW(dist::detect_launch(), std::runtime_error);
}

TEST(LocalCommunicator, CollectivesOfOneGiveTheInput) {
  const auto comm = dist::make_local_communicator();
  std::vector<double> values{1.5, -2};
  comm->all_reduce(std::span<double>(values), dist::ReduceOp::sum);
  EXPECT_EQ(values, (std::vector<double>{1.5, -2}));
  const std::byte b[2] = {std::byte{7}, std::byte{9}};
  EXPECT_EQ(comm->all_gather(b).size(), 2u);
  EXPECT_THROW(comm->broadcast({}, 1), std::invalid_argument);
  EXPECT_EQ(comm->split()->world(), 1);
}

// Records what GradientSync hands the transport.
class RecordingTransport final : public dist::BucketTransport {
 public:
  struct Start {
    std::size_t index;
    std::size_t tensors;
    bool before_finish;
  };
  int world() const noexcept override { return 2; }
  void start(std::size_t index, std::span<const nn::Tensor> gradients) override {
    starts->push_back({index, gradients.size(), !*finishing});
  }
  void finish() override { ++*finishes; }
  dist::TransportStats stats() const override { return {}; }
  std::vector<Start>* starts;
  bool* finishing;
  int* finishes;
};

// Tells the transport when Trainer::train_batch has reached GradientSync::finish.
class MarkingSync final : public nn::GradientSync {
 public:
  MarkingSync(dist::GradientSync& inner, bool& finishing) : inner_(inner), finishing_(finishing) {}
  int replicas() const noexcept override { return inner_.replicas(); }
  void begin() override { inner_.begin(); }
  void ready(nn::Layer& layer) override { inner_.ready(layer); }
  void finish() override {
    finishing_ = true;
    inner_.finish();
  }

 private:
  dist::GradientSync& inner_;
  bool& finishing_;
};

std::pair<nn::Tensor, nn::Tensor> small_batch() {
  std::vector<float> x(4 * 3 * 16 * 16);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 101.0f;
  nn::Tensor labels = nn::Tensor::zeros({4}, nn::DType::i32);
  for (int i = 0; i < 4; ++i) labels.data_as<std::int32_t>()[i] = i % 3;
  return {nn::Tensor::from_values({4, 3, 16, 16}, x), labels};
}

TEST(GradientSync, BucketsStartInOrderWhileBackwardRunsAndOnlyOnTheAccumulationGroupsLastBatch) {
  auto backend = nn::make_backend(nn::Device::cpu());
  auto model = nn::make_model("small_cnn", {.classes = 3, .seed = 1});
  std::vector<RecordingTransport::Start> starts;
  bool finishing = false;
  int finishes = 0;
  auto transport = std::make_unique<RecordingTransport>();
  transport->starts = &starts;
  transport->finishing = &finishing;
  transport->finishes = &finishes;
  dist::GradientSync sync(*model, *backend, std::move(transport), {.bucket_bytes = 32 << 10});
  ASSERT_GT(sync.buckets(), 2u);
  MarkingSync marking(sync, finishing);
  nn::Trainer trainer(*model, *backend,
                      {.schedule = {.base_lr = 0.1f, .total_steps = 10}, .accumulation = 2, .gradient_sync = &marking});
  const auto [x, y] = small_batch();
  trainer.train_batch(x, y);  // an accumulation micro-step: nothing summed
  EXPECT_TRUE(starts.empty());
  EXPECT_EQ(finishes, 0);
  trainer.train_batch(x, y);
  ASSERT_EQ(starts.size(), sync.buckets());
  EXPECT_EQ(finishes, 1);
  std::size_t tensors = 0;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    EXPECT_EQ(starts[i].index, i);
    tensors += starts[i].tensors;
  }
  std::size_t parameters = 0;
  model->for_each_parameter([&](const std::string&, nn::Parameter&) { ++parameters; });
  EXPECT_EQ(tensors, parameters);
  // The buckets of the last layers start before backward reaches the first ones.
  EXPECT_TRUE(starts.front().before_finish);
  EXPECT_EQ(trainer.step(), 1);
}

TEST(GradientSync, OverALocalCommunicatorTheWeightsAreThoseOfTrainingAlone) {
  auto backend = nn::make_backend(nn::Device::cpu());
  auto alone_model = nn::make_model("small_cnn", {.classes = 3, .seed = 1});
  auto synced_model = nn::make_model("small_cnn", {.classes = 3, .seed = 1});
  dist::GradientSync sync(*synced_model, *backend, dist::host_transport(dist::make_local_communicator()),
                          {.bucket_bytes = 16 << 10});
  nn::Trainer alone(*alone_model, *backend, {.schedule = {.base_lr = 0.1f, .total_steps = 10}});
  nn::Trainer synced(*synced_model, *backend,
                     {.schedule = {.base_lr = 0.1f, .total_steps = 10}, .gradient_sync = &sync});
  const auto [x, y] = small_batch();
  for (int i = 0; i < 3; ++i) {
    alone.train_batch(x, y);
    synced.train_batch(x, y);
  }
  std::vector<std::vector<float>> expected;
  alone_model->for_each_parameter(
      [&](const std::string&, nn::Parameter& p) { expected.push_back(p.value.to_vector()); });
  std::size_t k = 0;
  synced_model->for_each_parameter(
      [&](const std::string& name, nn::Parameter& p) { EXPECT_EQ(p.value.to_vector(), expected[k++]) << name; });
  EXPECT_EQ(sync.stats().syncs, 3);
  EXPECT_EQ(sync.stats().buckets, static_cast<std::int64_t>(3 * sync.buckets()));
}

// ---- the shares of an epoch

std::vector<std::vector<std::uint64_t>> shares(std::size_t size, std::uint32_t world, nodes::ShardRemainder remainder) {
  std::vector<std::vector<std::uint64_t>> out;
  for (std::uint32_t r = 0; r < world; ++r) {
    out.push_back(nodes::EpochOrder(size, {.seed = 5, .rank = r, .world = world, .remainder = remainder}).indices(2));
  }
  return out;
}

TEST(EpochShares, DropGivesEveryRankTheSameCountOfDisjointItems) {
  const auto s = shares(10, 3, nodes::ShardRemainder::drop);
  std::set<std::uint64_t> seen;
  for (const auto& share : s) {
    EXPECT_EQ(share.size(), 3u);
    seen.insert(share.begin(), share.end());
  }
  EXPECT_EQ(seen.size(), 9u);  // disjoint: one item of the 10 sits this epoch out
}

TEST(EpochShares, PadGivesEveryRankTheSameCountCoveringEveryItem) {
  const auto s = shares(10, 3, nodes::ShardRemainder::pad);
  std::set<std::uint64_t> seen;
  for (const auto& share : s) {
    EXPECT_EQ(share.size(), 4u);
    seen.insert(share.begin(), share.end());
  }
  EXPECT_EQ(seen.size(), 10u);
}

TEST(EpochShares, UnevenCoversEveryItemOnce) {
  const auto s = shares(10, 3, nodes::ShardRemainder::uneven);
  std::multiset<std::uint64_t> seen;
  for (const auto& share : s) seen.insert(share.begin(), share.end());
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_EQ(std::set<std::uint64_t>(seen.begin(), seen.end()).size(), 10u);
  EXPECT_EQ(s[0].size(), 4u);
  EXPECT_EQ(s[2].size(), 3u);
}

TEST(EpochShares, KStepsOfTwoRanksAreTheFirst2KItemsAndOneRankGoesOnFromThere) {
  const nodes::EpochOrder whole(20, {.seed = 5});
  const std::vector<std::uint64_t> permutation = whole.indices(1);
  const auto s = shares(20, 2, nodes::ShardRemainder::drop);
  // 2 ranks x 3 items each (a step of batch 3) = the permutation's first 6 items.
  std::multiset<std::uint64_t> stepped(s[0].begin(), s[0].begin() + 3);
  stepped.insert(s[1].begin(), s[1].begin() + 3);
  // (shares() uses epoch 2; compare with that epoch's permutation)
  const std::vector<std::uint64_t> epoch2 = whole.indices(2);
  EXPECT_EQ(stepped, std::multiset<std::uint64_t>(epoch2.begin(), epoch2.begin() + 6));
  // A checkpoint there holds position 6 (of the whole order); one rank resumes at 6 / 1.
  const std::vector<std::uint64_t> alone = nodes::EpochOrder(20, {.seed = 5}).indices(2);
  EXPECT_EQ(std::vector<std::uint64_t>(alone.begin() + 6, alone.end()),
            std::vector<std::uint64_t>(epoch2.begin() + 6, epoch2.end()));
  EXPECT_NE(permutation, epoch2);
}

}  // namespace
