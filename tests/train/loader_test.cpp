// stoke::train::Loader: batches pulled epoch after epoch equal the input pipeline's own, positions
// resume exactly, the pool bounds what a caller that keeps batches can hold, errors and skips are
// named, ranks share an epoch, a forked child gets an error instead of a hang.
#include "stoke/train/loader.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stoke/graph/pipeline.hpp>
#include <stoke/train/loader_settings.hpp>
#include <string>
#include <thread>
#include <vector>

#include "train_test_support.hpp"

namespace stoke::train {
namespace {

using namespace std::chrono_literals;
using test::TempDir;

// What a batch held, kept after its slot went back.
struct Seen {
  std::uint32_t epoch = 0;
  std::vector<std::uint64_t> indices;
  std::vector<std::byte> pixels;
  friend bool operator==(const Seen&, const Seen&) = default;
};

Seen seen(const nodes::Batch& b) {
  return {b.epoch(), {b.indices().begin(), b.indices().end()}, {b.data().begin(), b.data().end()}};
}

InputConfig config_for_loader() {
  InputConfig config = test::tiny_pass_input();
  config.shuffle = true;
  config.seed = 11;
  return config;
}

// The batches of one epoch from the loader's current position.
std::vector<Seen> epoch_of(Loader& loader) {
  std::vector<Seen> out;
  loader.begin();
  while (std::optional<LoaderBatch> b = loader.next()) {
    if (!b->valid()) break;
    out.push_back(seen(b->batch()));
  }
  return out;
}

// The batches of a plain pipeline over `epochs` epochs from `config`'s position.
std::vector<Seen> pipeline_batches(const nodes::DatasetPtr& dataset, InputConfig config, std::uint32_t epochs) {
  config.epochs = epochs;
  Input input = make_input(dataset, config);
  graph::Pipeline pipe(input.pipeline_options);
  std::vector<Seen> out;
  add_input(pipe, input, config).sink("keep", [&](nodes::Batch b) { out.push_back(seen(b)); });
  pipe.run();
  return out;
}

class LoaderTest : public ::testing::Test {
 protected:
  TempDir dir;
  std::filesystem::path root = test::write_tiny_shapes(dir);
  nodes::DatasetPtr dataset = open_dataset(root / "train");
};

TEST_F(LoaderTest, GivesThePipelinesBatchesEpochAfterEpochEachEndingWithAnEmptyBatch) {
  const InputConfig config = config_for_loader();
  Loader loader(dataset, config);
  EXPECT_EQ(loader.size(), 4u);  // 16 images in batches of 4
  EXPECT_EQ(loader.items_per_epoch(), 16u);
  const std::vector<Seen> expected = pipeline_batches(dataset, config, 3);
  ASSERT_EQ(expected.size(), 12u);
  std::vector<Seen> got;
  for (std::uint32_t epoch = 0; epoch < 3; ++epoch) {
    EXPECT_EQ(loader.position(), (LoaderPosition{epoch, 0}));
    const std::vector<Seen> one = epoch_of(loader);
    ASSERT_EQ(one.size(), 4u) << "epoch " << epoch;
    for (const Seen& s : one) EXPECT_EQ(s.epoch, epoch);
    got.insert(got.end(), one.begin(), one.end());
  }
  EXPECT_EQ(got, expected);
  EXPECT_NE(got[0].indices, got[4].indices);  // each epoch its own order
  EXPECT_EQ(loader.position(), (LoaderPosition{3, 0}));
  EXPECT_EQ(loader.stats().batches, 12u);
  EXPECT_EQ(loader.stats().images, 48u);
}

TEST_F(LoaderTest, APositionTakenMidEpochResumesWithTheSameBatchesInAnotherLoader) {
  const InputConfig config = config_for_loader();
  std::vector<Seen> rest;
  LoaderPosition saved;
  {
    Loader loader(dataset, config);
    epoch_of(loader);  // epoch 0
    loader.begin();    // epoch 1
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(loader.next()->valid());
    saved = loader.position();
    while (std::optional<LoaderBatch> b = loader.next()) {
      if (!b->valid()) break;
      rest.push_back(seen(b->batch()));
    }
  }
  EXPECT_EQ(saved, (LoaderPosition{1, 8}));
  ASSERT_EQ(rest.size(), 2u);
  Loader resumed(dataset, config);
  resumed.seek(saved);
  EXPECT_EQ(epoch_of(resumed), rest);
  EXPECT_EQ(resumed.position(), (LoaderPosition{2, 0}));
}

// A LoaderBatch's fields view its slot (no copy): named, typed and shaped as the batch is laid out.
TEST_F(LoaderTest, TheBatchesFieldsViewTheSlotWithTheirTypesAndShapes) {
  const InputConfig config = config_for_loader();
  Loader loader(dataset, config);
  loader.begin();
  const std::optional<LoaderBatch> b = loader.next();
  ASSERT_TRUE(b && b->valid());
  const nodes::Batch& batch = b->batch();
  std::vector<std::string> names;
  for (const BatchField& f : b->fields()) names.push_back(f.name);
  EXPECT_EQ(names, (std::vector<std::string>{"images", "labels", "indices"}));
  const auto n = static_cast<std::int64_t>(b->size());
  const BatchField& images = *b->field("images");
  EXPECT_EQ(images.data, static_cast<const void*>(batch.data().data()));
  const bool nchw = batch.shape().layout == nodes::BatchLayout::nchw;
  const std::int64_t side = config.size;
  EXPECT_EQ(images.shape,
            nchw ? (std::vector<std::int64_t>{n, 3, side, side}) : (std::vector<std::int64_t>{n, side, side, 3}));
  EXPECT_EQ(images.type, (FieldType{nchw ? FieldType::Kind::floating : FieldType::Kind::unsigned_int,
                                    static_cast<std::uint8_t>(nchw ? 32 : 8)}));
  EXPECT_EQ(b->field("labels")->type, (FieldType{FieldType::Kind::signed_int, 32}));
  EXPECT_EQ(b->field("labels")->data, static_cast<const void*>(batch.labels().data()));
  EXPECT_EQ(b->field("indices")->shape, std::vector<std::int64_t>{n});
  EXPECT_EQ(b->field("mask"), nullptr);
  // Every field lies in the slot's block, which starts at the pixels.
  EXPECT_EQ(static_cast<const void*>(b->block().data()), images.data);
  for (const BatchField& f : b->fields()) {
    const auto* at = static_cast<const std::byte*>(f.data);
    EXPECT_TRUE(at >= b->block().data() && at < b->block().data() + b->block().size()) << f.name;
  }
}

TEST_F(LoaderTest, AnEpochLeftEarlyCountsAsDoneAndSetEpochChoosesTheNext) {
  const InputConfig config = config_for_loader();
  Loader loader(dataset, config);
  loader.begin();
  ASSERT_TRUE(loader.next()->valid());
  loader.begin();  // as a new DataLoader iterator: the next epoch, from its start
  EXPECT_EQ(loader.position(), (LoaderPosition{1, 0}));
  const std::optional<LoaderBatch> first = loader.next();
  ASSERT_TRUE(first && first->valid());
  EXPECT_EQ(first->epoch(), 1u);

  loader.set_epoch(5);
  EXPECT_EQ(epoch_of(loader), [&] {
    InputConfig at5 = config;
    at5.first_epoch = 5;
    return pipeline_batches(dataset, at5, 1);
  }());
}

// Items the loader's pipeline has read from its source so far.
std::uint64_t items_sourced(const Loader& loader) {
  for (const graph::StageStats& stage : loader.stats().stages)
    if (stage.name == "source") return stage.items_out;
  return 0;
}

TEST_F(LoaderTest, ALoaderToldTheRunsEpochsPreparesNothingPastTheLastAndRefusesALaterOne) {
  const InputConfig config = config_for_loader();
  Loader endless(dataset, config);
  Loader two(dataset, config, 2);
  std::vector<Seen> got;
  for (std::uint32_t epoch = 0; epoch < 2; ++epoch) {
    epoch_of(endless);
    const std::vector<Seen> one = epoch_of(two);
    got.insert(got.end(), one.begin(), one.end());
  }
  EXPECT_EQ(got, pipeline_batches(dataset, config, 2));
  // Without an end the pipeline goes on into epoch 2 while no one asks for it; with one it stops.
  for (int i = 0; i < 500 && items_sourced(endless) <= 32; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_GT(items_sourced(endless), 32u);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(items_sourced(two), 32u);
  EXPECT_EQ(two.position(), (LoaderPosition{2, 0}));
  EXPECT_THROW(two.begin(), std::out_of_range);

  two.set_epoch(1);  // an epoch of the run again: a new pipeline, ending where the run does
  EXPECT_EQ(epoch_of(two), std::vector<Seen>(got.begin() + 4, got.end()));
  EXPECT_THROW(two.begin(), std::out_of_range);

  InputConfig late = config;
  late.first_epoch = 2;
  EXPECT_THROW(Loader(dataset, late, 2), std::invalid_argument);
}

TEST_F(LoaderTest, ACallerThatKeepsBatchesMakesThePipelineWaitForASlot) {
  InputConfig config = config_for_loader();
  config.batch_size = 2;  // 8 batches an epoch
  config.prefetch = 2;    // a pool of prefetch + 2 = 4 slots
  Loader loader(dataset, config);
  loader.begin();
  std::vector<LoaderBatch> kept;
  for (int i = 0; i < 4; ++i) {
    std::optional<LoaderBatch> b = loader.next(5s);
    ASSERT_TRUE(b && b->valid()) << i;
    kept.push_back(std::move(*b));
  }
  EXPECT_FALSE(loader.next(300ms).has_value()) << "a fifth batch while the caller holds the 4 slots";
  kept.erase(kept.begin());  // one slot back
  const std::optional<LoaderBatch> fifth = loader.next(5s);
  ASSERT_TRUE(fifth && fifth->valid());
  EXPECT_EQ(loader.position().position, 10u);
}

TEST_F(LoaderTest, RanksShareEachEpochInEqualParts) {
  InputConfig config = config_for_loader();
  config.world = 3;  // 16 items: padded to 6 each
  config.remainder = nodes::ShardRemainder::pad;
  std::multiset<std::uint64_t> all;
  for (std::uint32_t rank = 0; rank < 3; ++rank) {
    config.rank = rank;
    Loader loader(dataset, config);
    EXPECT_EQ(loader.items_per_epoch(), 6u);
    EXPECT_EQ(loader.size(), 2u);
    for (const Seen& s : epoch_of(loader)) all.insert(s.indices.begin(), s.indices.end());
  }
  EXPECT_EQ(all.size(), 18u);
  EXPECT_EQ(std::set<std::uint64_t>(all.begin(), all.end()).size(), 16u);
}

TEST_F(LoaderTest, AnUnreadableFileIsSkippedAndNamedOrFailsTheEpochNamingIt) {
  { std::ofstream(dataset->name(3), std::ios::trunc) << "not a jpeg"; }
  InputConfig config = config_for_loader();
  {
    Loader loader(dataset, config);
    std::size_t images = 0;
    for (const Seen& s : epoch_of(loader)) images += s.indices.size();
    EXPECT_EQ(images, 15u);
    const LoaderStats stats = loader.stats();
    // Once, or twice when the pipeline, running ahead, has reached it in the next epoch too; the
    // file is listed once either way, with the epochs it was skipped in.
    EXPECT_GE(stats.skipped, 1u);
    ASSERT_EQ(stats.skipped_files.size(), 1u);
    EXPECT_EQ(stats.skipped_files[0].file, dataset->name(3));
    EXPECT_EQ(stats.skipped_files[0].epochs.size(), stats.skipped);
    EXPECT_EQ(stats.skipped_files[0].epochs.front(), 0);
  }
  config.on_error = graph::OnError::fail;
  Loader loader(dataset, config);
  loader.begin();
  try {
    while (loader.next()->valid()) {
    }
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(dataset->name(3)), std::string::npos) << e.what();
  }
  EXPECT_THROW(loader.next(), std::logic_error);  // the epoch is over; begin() starts again
}

TEST_F(LoaderTest, StatsMayBeAskedFromAnotherThreadWhileTheCallerRestartsAndIterates) {
  Loader loader(dataset, config_for_loader());
  std::atomic<bool> done{false};
  std::uint64_t looks = 0;
  std::thread watcher([&] {
    while (!done.load()) {
      const LoaderStats s = loader.stats();
      EXPECT_LE(s.images, 16u * 6);
      (void)loader.position();
      ++looks;
    }
  });
  for (std::uint32_t epoch = 0; epoch < 6; ++epoch) {
    loader.set_epoch(epoch % 2 == 0 ? epoch : epoch + 10);  // a new pipeline each time
    EXPECT_EQ(epoch_of(loader).size(), 4u);
  }
  done = true;
  watcher.join();
  EXPECT_GT(looks, 0u);
}

TEST_F(LoaderTest, WritesItsReportAsJson) {
  Loader loader(dataset, config_for_loader());
  epoch_of(loader);
  const std::filesystem::path path = dir / "loader.json";
  loader.write_report(path);
  const nlohmann::json report = nlohmann::json::parse(std::ifstream(path));
  EXPECT_EQ(report["batches"], 4);
  EXPECT_EQ(report["images"], 16);
  EXPECT_EQ(report["epoch"], 1);
  EXPECT_FALSE(report["stages"].empty());
  EXPECT_THROW(loader.write_report(dir / "no" / "such" / "folder.json"), std::runtime_error);
}

TEST_F(LoaderTest, AForkedChildGetsAnErrorNotAHang) {
  Loader loader(dataset, config_for_loader());
  loader.begin();
  ASSERT_TRUE(loader.next()->valid());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int status = 1;
    try {
      (void)loader.next();
    } catch (const std::runtime_error& e) {
      status = std::string(e.what()).find("forked") != std::string::npos ? 0 : 2;
    }
    ::_exit(status);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(loader.next()->valid());  // the parent goes on
}

TEST_F(LoaderTest, RefusesAStartPastTheEpochAndNextBeforeBegin) {
  InputConfig config = config_for_loader();
  config.start = 17;
  EXPECT_THROW(Loader(dataset, config), std::invalid_argument);
  Loader loader(dataset, config_for_loader());
  EXPECT_THROW(loader.next(), std::logic_error);
  EXPECT_THROW(loader.seek({0, 17}), std::invalid_argument);
}

// The settings a binding gives are declared once: what describe_loader_settings lists (and Python
// builds stoke.Loader's signature from) is what loader_settings_from_json reads and input_config maps.
TEST(LoaderSettings, TheDeclarationListsEverySettingItsTypeAndDefaultInOrder) {
  const nlohmann::json declared = describe_loader_settings();
  ASSERT_GE(declared.size(), 20u);
  EXPECT_EQ(declared[0]["name"], "data");
  EXPECT_EQ(declared[1]["name"], "transforms");
  EXPECT_EQ(declared[1]["type"], "list[str]");
  nlohmann::json object = nlohmann::json::object();
  for (const nlohmann::json& d : declared) {
    EXPECT_FALSE(d["doc"].get<std::string>().empty()) << d["name"];
    object[d["name"].get<std::string>()] = d["default"];
    if (d["name"] == "batch_size") {
      EXPECT_EQ(d["type"], "int");
    } else if (d["name"] == "threads") {
      EXPECT_EQ(d["type"], "int?");
      EXPECT_TRUE(d["default"].is_null());
    }
  }
  // Every default read back is the default.
  const LoaderSettings back = loader_settings_from_json(object.dump());
  EXPECT_EQ(back.batch_size, LoaderSettings{}.batch_size);
  EXPECT_EQ(back.nice, 10);
  EXPECT_FALSE(back.threads.has_value());
}

TEST(LoaderSettings, JsonIsReadByNameAndMistakesAreNamed) {
  const LoaderSettings s =
      loader_settings_from_json(R"({"data": "d", "batch_size": 8, "threads": 3, "epochs": null, "remainder": "drop"})");
  EXPECT_EQ(s.data, "d");
  EXPECT_EQ(s.batch_size, 8u);
  EXPECT_EQ(s.threads, 3);
  EXPECT_FALSE(s.epochs.has_value());
  const InputConfig c = input_config(s);
  EXPECT_EQ(c.batch_size, 8u);
  EXPECT_EQ(c.threads, 3);
  EXPECT_EQ(c.remainder, ShardRemainder::drop);
  EXPECT_EQ(c.nice, 10);
  const auto message = [](const std::string& json) {
    try {
      (void)input_config(loader_settings_from_json(json));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(R"({"bogus": 1})"), "the loader has no setting 'bogus'");
  EXPECT_EQ(message(R"({"threads": "many"})"),
            "the loader setting 'threads' has the wrong type: \"many\" (it takes int?)");
  EXPECT_EQ(message(R"({"color": "cmyk"})"), "color must be rgb or keep, not 'cmyk'");
  EXPECT_EQ(message(R"({"remainder": "x"})"), "remainder must be pad, drop or uneven, not 'x'");
  EXPECT_EQ(message(R"({"rank": 2, "world": 2})"), "rank 2 is not below world 2");
  EXPECT_EQ(message(R"({"epochs": 0})"), "epochs=0: the run's epochs must be at least 1 (None: no end)");
}

}  // namespace
}  // namespace stoke::train
