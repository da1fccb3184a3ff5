// Opening datasets (stoke/train/input.hpp, fit.hpp): what open_dataset makes of each kind of path
// and --format, the errors that name the path and the fix, and open_training_data's checks.
#include "stoke/train/input.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <stoke/nodes/cifar.hpp>
#include <stoke/nodes/file_list.hpp>
#include <stoke/nodes/image_folder.hpp>
#include <stoke/nodes/jpeg_encode.hpp>
#include <stoke/nodes/packed.hpp>
#include <stoke/nodes/segmentation_folder.hpp>
#include <stoke/nodes/tar_shards.hpp>
#include <stoke/nodes/tar_writer.hpp>
#include <string>
#include <thread>
#include <utility>

#include "dataset_test_support.hpp"
#include "stoke/train/fit.hpp"
#include "stoke/train/json.hpp"

namespace stoke::train {
namespace {

namespace fs = std::filesystem;
using nodes::test::error_message;
using nodes::test::small_jpeg;
using nodes::test::TempDir;
using nodes::test::write_bytes;
using nodes::test::write_text;
using ::testing::HasSubstr;

// dir/photos/{cat,dog}/N.jpg: `per_class` images each.
fs::path photo_folder(const TempDir& dir, const std::string& name, int per_class,
                      std::vector<std::string> classes = {"cat", "dog"}) {
  for (const std::string& c : classes) {
    for (int i = 0; i < per_class; ++i) write_bytes(dir / name / c / (std::to_string(i) + ".jpg"), small_jpeg(i));
  }
  return dir / name;
}

template <class T>
bool is(const nodes::DatasetPtr& dataset) {
  return dynamic_cast<const T*>(dataset.get()) != nullptr;
}

TEST(OpenDataset, TellsTheKindFromThePath) {
  const TempDir dir;
  const fs::path folder = photo_folder(dir, "photos", 2);
  write_text(dir / "list.csv", "photos/cat/0.jpg,0\nphotos/dog/1.jpg,1\n");
  nodes::PackWriter pack(dir / "photos.stoke", {"cat", "dog"});
  pack.add(small_jpeg(1), 0, "a.jpg");
  pack.finish();
  // A pack under another name is recognised by its magic.
  fs::copy_file(dir / "photos.stoke", dir / "no_extension");
  fs::copy_file(dir / "photos.stoke.idx", dir / "no_extension.idx");

  EXPECT_TRUE(is<nodes::ImageFolder>(open_dataset(folder)));
  EXPECT_TRUE(is<nodes::FileList>(open_dataset(dir / "list.csv")));
  EXPECT_THAT(open_dataset(dir / "list.csv")->name(1), HasSubstr("photos/dog/1.jpg"));  // relative to the list
  EXPECT_TRUE(is<nodes::PackedDataset>(open_dataset(dir / "photos.stoke")));
  EXPECT_TRUE(is<nodes::PackedDataset>(open_dataset(dir / "no_extension")));
  EXPECT_TRUE(is<nodes::ImageFolder>(open_dataset(folder, "folder")));
  EXPECT_TRUE(is<nodes::FileList>(open_dataset(dir / "list.csv", "filelist")));
  EXPECT_TRUE(is<nodes::PackedDataset>(open_dataset(dir / "photos.stoke", "packed")));
}

TEST(OpenDataset, ErrorsNameThePathAndTheFix) {
  const TempDir dir;
  const fs::path folder = photo_folder(dir, "photos", 1);
  write_text(dir / "x.stoke.idx", "index");
  const std::string missing = error_message([&] { open_dataset(dir / "missing"); });
  EXPECT_THAT(missing, HasSubstr((dir / "missing").string()));
  EXPECT_THAT(missing, HasSubstr("gen-shapes"));
  EXPECT_THAT(error_message([&] { open_dataset(dir / "x.stoke.idx"); }), HasSubstr("give the data file"));
  EXPECT_THAT(error_message([&] { open_dataset(folder, "packed"); }), HasSubstr("--format packed needs a file"));
  EXPECT_THAT(error_message([&] { open_dataset(dir / "x.stoke.idx", "folder"); }),
              HasSubstr("--format folder needs a folder"));
  EXPECT_THROW(open_dataset(folder, "tiff"), std::invalid_argument);
  EXPECT_THAT(error_message([&] { open_dataset(folder, "tiff"); }),
              HasSubstr("unknown data format 'tiff'; known: cifar, coco, filelist"));
}

// dir/name/{images,masks}/N.jpg: `count` pairs of 24x16 images and grey masks.
fs::path segmentation_folder(const TempDir& dir, const std::string& name, int count) {
  for (int i = 0; i < count; ++i) {
    write_bytes(dir / name / "images" / (std::to_string(i) + ".jpg"), small_jpeg(i));
    write_bytes(dir / name / "masks" / (std::to_string(i) + ".jpg"),
                nodes::encode_jpeg(cv::Mat(16, 24, CV_8UC1, cv::Scalar(i)), 100));
  }
  return dir / name;
}

TEST(OpenDataset, ASegmentationFolderIsRecognisedOrAskedFor) {
  const TempDir dir;
  const fs::path pairs = segmentation_folder(dir, "pairs", 2);
  EXPECT_TRUE(is<nodes::SegmentationFolder>(open_dataset(pairs)));
  EXPECT_TRUE(is<nodes::SegmentationFolder>(open_dataset(pairs, "segmentation")));
  // Another folder beside images/ and masks/: class folders that happen to be called so.
  write_bytes(pairs / "other" / "0.jpg", small_jpeg(5));
  EXPECT_TRUE(is<nodes::ImageFolder>(open_dataset(pairs)));
}

TEST(OpenDataset, TarShardsAreRecognisedOrAskedFor) {
  const TempDir dir;
  const fs::path folder = photo_folder(dir, "photos", 2);
  const auto source = open_dataset(folder);
  fs::create_directories(dir / "shards");
  nodes::TarWriter writer(nodes::TarShardPattern((dir / "shards" / "train-%06d.tar").string()), {.shard_samples = 2});
  for (std::size_t i = 0; i < source->size(); ++i)
    writer.add(nodes::tar_key(i, source->size()), nodes::tar_members(source->read(i)));
  writer.finish();
  for (const fs::path& data : {dir / "shards" / "train-000000.tar", dir / "shards"}) {
    const auto shards = open_dataset(data);
    EXPECT_TRUE(is<nodes::TarShards>(shards)) << data;
  }
  const auto all = open_dataset(dir / "shards", "tar");
  ASSERT_TRUE(is<nodes::TarShards>(all));
  ASSERT_EQ(all->size(), source->size());
  for (std::size_t i = 0; i < all->size(); ++i) {
    EXPECT_EQ(all->read(i).label, source->read(i).label);
    EXPECT_EQ(nodes::test::to_vector(all->read(i).bytes), nodes::test::to_vector(source->read(i).bytes));
  }
}

TEST(BatchShape, ComesFromTheDataWhenItIsNotPlainRgb) {
  const TempDir dir;
  InputConfig config;
  config.batch_size = 4;
  config.size = 8;
  config.transforms = {"random_resized_crop size=8"};
  const auto shape_for = [&](const fs::path& data, const InputConfig& c) {
    return batch_shape(*open_dataset(data), c, make_transforms(c));
  };
  // Photos decoded to RGB: 3 channels of uint8, no decoding needed to know it.
  const fs::path photos = photo_folder(dir, "photos", 2);
  EXPECT_EQ(shape_for(photos, config).describe(), "4 x 8x8x3 nhwc u8");
  InputConfig normalized = config;
  normalized.transforms.push_back("normalize");
  EXPECT_EQ(shape_for(photos, normalized).describe(), "4 x 8x8x3 nchw f32");

  // Grey scans kept as they are: one channel.
  for (int i = 0; i < 2; ++i)
    write_bytes(dir / "scans" / "a" / (std::to_string(i) + ".jpg"),
                nodes::encode_jpeg(cv::Mat(16, 24, CV_8UC1, cv::Scalar(9))));
  InputConfig keep = config;
  keep.decode = default_decode_options(nodes::DecodeColor::keep);
  EXPECT_EQ(shape_for(dir / "scans", keep).describe(), "4 x 8x8x1 nhwc u8");
  EXPECT_EQ(shape_for(dir / "scans", config).describe(), "4 x 8x8x3 nhwc u8");

  // Pairs: a mask beside the pixels, whatever the colour mode.
  EXPECT_EQ(shape_for(segmentation_folder(dir, "pairs", 2), config).describe(), "4 x 8x8x3 nhwc u8 + mask u8");

  // The transforms must end at the size; unreadable data is named.
  InputConfig wrong = keep;
  wrong.size = 9;
  EXPECT_THAT(error_message([&] { shape_for(dir / "scans", wrong); }), HasSubstr("the transforms make 8x8 images"));
  write_bytes(dir / "broken" / "a" / "0.jpg", nodes::test::distinct_bytes(1));
  EXPECT_THAT(error_message([&] { shape_for(dir / "broken", keep); }),
              HasSubstr("none of its first 1 items could be read and decoded"));
}

// A trailing step that is only a normalization (Transform::normalization(), not its name) is left
// to the device: its parameters become the convert, and the batches stay uint8 NHWC.
TEST(MakeInput, ConvertOnDeviceTakesTheTrailingNormalizationOffTheHost) {
  const TempDir dir;
  InputConfig config;
  config.batch_size = 2;
  config.size = 8;
  config.convert_on_device = true;
  config.autotune = false;
  config.transforms = {"random_resized_crop size=8", "normalize mean=0.5 std=0.25 range=100"};
  const fs::path photos = photo_folder(dir, "photos", 2);
  const Input with = make_input(open_dataset(photos), config);
  ASSERT_TRUE(with.convert.has_value());
  EXPECT_EQ(with.convert->mean, std::vector<float>{0.5f});
  EXPECT_EQ(with.convert->stddev, std::vector<float>{0.25f});
  EXPECT_EQ(with.convert->range, 100.0f);
  ASSERT_EQ(with.transforms.size(), 1u);
  EXPECT_EQ(with.transforms[0]->name(), "random_resized_crop");
  EXPECT_EQ(with.pool.shape().describe(), "2 x 8x8x3 nhwc u8");

  config.transforms.pop_back();  // none: a plain 0..1 scale
  const Input without = make_input(open_dataset(photos), config);
  ASSERT_TRUE(without.convert.has_value());
  EXPECT_EQ(without.convert->mean, std::vector<float>{0.0f});
  EXPECT_EQ(without.convert->stddev, std::vector<float>{1.0f});
  EXPECT_EQ(without.transforms.size(), 1u);
}

// Float batches on the host: the trailing normalize of 8-bit images moves to the batch stage,
// which writes the same bytes in one pass (InputConfig::normalize_in_batch).
TEST(MakeInput, TheBatchStageNormalizesFloatBatchesToTheSameBytes) {
  const TempDir dir;
  InputConfig config;
  config.batch_size = 3;
  config.size = 8;
  config.autotune = false;
  config.threads = 2;
  config.transforms = {"random_resized_crop size=8", "random_horizontal_flip", "normalize mean=0.5 std=0.25"};
  const fs::path photos = photo_folder(dir, "photos", 5);
  const auto batches_of = [&](bool in_batch) {
    config.normalize_in_batch = in_batch;
    const Input input = make_input(open_dataset(photos), config);
    EXPECT_EQ(input.normalize_in_batch.has_value(), in_batch);
    EXPECT_EQ(input.transforms.size(), in_batch ? 2u : 3u);
    EXPECT_EQ(input.pool.shape().describe(), "3 x 8x8x3 nchw f32");
    std::vector<std::vector<float>> out;
    graph::Pipeline pipe(input.pipeline_options);
    add_input(pipe, input, config).sink("keep", [&](nodes::Batch batch) {
      const auto values = batch.f32();
      out.emplace_back(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(batch.size() * 3 * 8 * 8));
    });
    pipe.run();
    return out;
  };
  const auto fused = batches_of(true);
  const auto plain = batches_of(false);
  ASSERT_GE(fused.size(), 2u);
  EXPECT_EQ(fused, plain);
}

TEST(OpenTrainingData, FindsTheSiblingValidationFolder) {
  const TempDir dir;
  photo_folder(dir, "data/train", 2);
  photo_folder(dir, "data/val", 1);
  const TrainingData data = open_training_data(dir / "data" / "train", {}, "auto", 4);
  EXPECT_EQ(data.train->size(), 4u);
  ASSERT_NE(data.val, nullptr);
  EXPECT_EQ(data.val->size(), 2u);
  EXPECT_EQ(data.val_path, dir / "data" / "val");

  // Not a folder named "train": no validation unless one is given.
  photo_folder(dir, "other", 2);
  EXPECT_EQ(open_training_data(dir / "other").val, nullptr);
  EXPECT_NE(open_training_data(dir / "other", dir / "data" / "val").val, nullptr);
}

TEST(OpenTrainingData, RefusesWhatCannotBeTrainedOn) {
  const TempDir dir;
  const fs::path two = photo_folder(dir, "two", 2);
  const fs::path one_class = photo_folder(dir, "one_class", 4, {"only"});
  const fs::path other_classes = photo_folder(dir, "other_classes", 1, {"cat", "mouse"});
  EXPECT_THAT(error_message([&] { open_training_data(two, {}, "auto", 8); }),
              HasSubstr(two.string() + " has 4 images, fewer than one batch of 8"));
  EXPECT_THAT(error_message([&] { open_training_data(one_class); }), HasSubstr("needs at least two"));
  const std::string message = error_message([&] { open_training_data(two, other_classes); });
  EXPECT_THAT(message, HasSubstr(other_classes.string() + " has other classes than " + two.string()));
}

TEST(EvaluationInput, KeepsThePipelineAndEvaluatesInOrder) {
  InputConfig train;
  train.batch_size = 32;
  train.size = 48;
  train.threads = 3;
  train.drop_last = true;
  train.on_error = graph::OnError::fail;
  const InputConfig val = evaluation_input(train, {"resize size=48", "normalize"});
  EXPECT_EQ(val.batch_size, 32u);
  EXPECT_EQ(val.size, 48);
  EXPECT_EQ(val.threads, 3);
  EXPECT_EQ(val.on_error, graph::OnError::fail);
  EXPECT_FALSE(val.shuffle);
  EXPECT_FALSE(val.drop_last);
  EXPECT_EQ(val.tuning.target, "evaluate");
  EXPECT_EQ(val.transforms.size(), 2u);
}

TEST(AddInput, TheParallelStagesStartWithinTheCpuBudget) {
  TempDir dir;
  write_bytes(dir / "a" / "0.jpg", small_jpeg(1, 8, 8));
  const auto concurrency_of = [&](int budget) {
    InputConfig config;
    config.batch_size = 1;
    config.size = 8;
    config.transforms = {"resize size=8x8"};
    config.tuning.cpu_budget = budget;
    Input input = make_input(open_dataset(dir.path()), config);
    graph::Pipeline pipe(input.pipeline_options);
    add_input(pipe, input, config).sink("count", [](nodes::Batch) {});
    for (const graph::StageStats& s : pipe.stats())
      if (s.name == "decode") return std::pair{s.concurrency, s.max_concurrency};
    return std::pair{0, 0};
  };
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_EQ(concurrency_of(0), std::pair(cores, 2 * cores));  // one per core, room to grow
  EXPECT_EQ(concurrency_of(1), std::pair(1, 2 * cores));      // the budget's one core to start
}

// A dataset of no items that left out `n` files when it opened: `prefix`0, `prefix`1, ...
class LeavesOut final : public nodes::Dataset {
 public:
  LeavesOut(const std::string& prefix, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) ignored_.push_back({prefix + std::to_string(i), "why " + std::to_string(i)});
  }
  std::size_t size() const noexcept override { return 0; }
  int label(std::size_t) const override { return -1; }
  std::string name(std::size_t i) const override { return std::to_string(i); }
  nodes::Sample read(std::size_t) const override { throw std::out_of_range("LeavesOut has no items"); }
  const std::vector<nodes::IgnoredFile>& ignored() const noexcept override { return ignored_; }

 private:
  std::vector<nodes::IgnoredFile> ignored_;
};

std::vector<std::string> paths_of(const LeftOut& left_out) {
  std::vector<std::string> paths;
  for (const nodes::IgnoredFile& f : left_out.files) paths.push_back(f.path);
  return paths;
}

TEST(LeftOut, ListsTheFirstFilesAndCountsThemAll) {
  const LeftOut many = left_out_of(LeavesOut("a/", 250));
  EXPECT_EQ(many.count, 250u);
  ASSERT_EQ(many.files.size(), max_listed_left_out);
  EXPECT_EQ(many.files.front().path, "a/0");
  EXPECT_EQ(many.files.front().reason, "why 0");
  EXPECT_EQ(many.files.back().path, "a/" + std::to_string(max_listed_left_out - 1));

  const LeftOut few = left_out_of(LeavesOut("b/", 3), 10);
  EXPECT_EQ(few.count, 3u);
  EXPECT_EQ(paths_of(few), (std::vector<std::string>{"b/0", "b/1", "b/2"}));

  const LeftOut none = left_out_of(LeavesOut("c/", 0));
  EXPECT_EQ(none.count, 0u);
  EXPECT_TRUE(none.files.empty());
  EXPECT_EQ(left_out_of(LeavesOut("d/", 5), 0).count, 5u);  // nothing listed, still counted
}

TEST(LeftOut, TwoDatasetsMakeOneBoundedListWithTheCountsSummed) {
  LeftOut run = left_out_of(LeavesOut("train/", 4), 5);
  merge_left_out(run, left_out_of(LeavesOut("val/", 3), 5), 5);
  EXPECT_EQ(run.count, 7u);
  EXPECT_EQ(paths_of(run), (std::vector<std::string>{"train/0", "train/1", "train/2", "train/3", "val/0"}));
  merge_left_out(run, left_out_of(LeavesOut("more/", 200)), 5);  // no room left: counted only
  EXPECT_EQ(run.count, 207u);
  EXPECT_EQ(run.files.size(), 5u);
}

TEST(LeftOut, EveryJsonObjectCarriesTheCountAndTheFilesApartFromTheSkips) {
  const LeftOut left_out = left_out_of(LeavesOut("shard.tar#k", 150));
  EXPECT_EQ(left_out_files_json(left_out_of(LeavesOut("x", 2))).dump(),
            R"([{"file":"x0","reason":"why 0"},{"file":"x1","reason":"why 1"}])");

  FitResult fit;
  fit.left_out = left_out;
  const nlohmann::ordered_json run = to_json(fit);
  EXPECT_EQ(run["left_out"], 150);
  EXPECT_EQ(run["left_out_files"].size(), max_listed_left_out);
  EXPECT_EQ(run["left_out_files"][0]["file"], "shard.tar#k0");
  EXPECT_EQ(run["skipped"], 0);
  EXPECT_TRUE(run["skipped_files"].empty());

  Evaluation evaluation;
  evaluation.left_out = left_out;
  const nlohmann::ordered_json evaluated = to_json(evaluation, ModelCard{});
  EXPECT_EQ(evaluated["left_out"], 150);
  EXPECT_EQ(evaluated["left_out_files"].size(), max_listed_left_out);
  EXPECT_EQ(evaluated["skipped"], 0);

  LoaderStats stats;
  stats.left_out = left_out;
  const nlohmann::ordered_json loaded = to_json(stats, LoaderPosition{});
  EXPECT_EQ(loaded["left_out"], 150);
  EXPECT_EQ(loaded["left_out_files"][1]["reason"], "why 1");
  EXPECT_EQ(loaded["skipped"], 0);
}

TEST(Network, TheJsonAndTheTextSayWhatRemoteShardsCostAndNothingForLocalData) {
  EXPECT_TRUE(network_json(std::nullopt).is_null());
  const nodes::NetworkStats streamed{.requests = 40, .retries = 1, .bytes = 2'500'000, .wait_seconds = 0.75};
  const nlohmann::ordered_json plain = network_json(streamed);
  EXPECT_EQ(plain["requests"], 40);
  EXPECT_EQ(plain["bytes"], 2'500'000);
  EXPECT_EQ(plain["wait_s"], 0.75);
  EXPECT_FALSE(plain.contains("cache_hits")) << "no cache, no cache fields";
  EXPECT_EQ(network_text(streamed), "network: 2.5 MB in 40 requests (1 retries), 0.8 s waiting");

  nodes::NetworkStats cached = streamed;
  cached.cached = true;
  cached.cache_hits = 7;
  cached.cache_misses = 2;
  cached.cache_budget = 1'000'000'000;
  EXPECT_EQ(network_json(cached)["cache_hits"], 7);
  EXPECT_THAT(network_text(cached), ::testing::HasSubstr("cache: 7 hits, 2 misses, 0 prefetched, 0 evictions"));

  FitResult fit;
  EXPECT_TRUE(to_json(fit)["network"].is_null());
  fit.network = cached;
  EXPECT_EQ(to_json(fit)["network"]["cache_misses"], 2);
  LoaderStats stats;
  stats.network = streamed;
  EXPECT_EQ(to_json(stats, LoaderPosition{})["network"]["requests"], 40);
}

TEST(Network, TheBottleneckSaysNetworkWhenTheReadStageMostlyWaitedOnIt) {
  graph::StageStats read;
  read.name = "read";
  read.busy = std::chrono::seconds(2);
  graph::StageStats decode;
  decode.name = "decode";
  const std::vector<graph::StageStats> stages{read, decode};
  const nodes::NetworkStats waited{.wait_seconds = 1.5};
  const nodes::NetworkStats hardly{.wait_seconds = 0.5};
  EXPECT_EQ(network_or("read", stages, waited), "network");
  EXPECT_EQ(network_or("read", stages, hardly), "read");
  EXPECT_EQ(network_or("decode", stages, waited), "decode") << "only the read stage waits on the network";
  EXPECT_EQ(network_or("read", stages, std::nullopt), "read");
}

}  // namespace
}  // namespace stoke::train
