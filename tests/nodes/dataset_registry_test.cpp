// DatasetRegistry: data formats by name and by guess, their parameters checked as the transform
// registry checks its specs, and an added format (as a plugin adds one) found both ways.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stoke/nodes/coco_dataset.hpp>
#include <stoke/nodes/dataset_registry.hpp>
#include <string>
#include <vector>

#include "dataset_test_support.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

// A dataset of `n` unlabelled items that remembers what it was opened with.
class Counted final : public Dataset {
 public:
  Counted(std::size_t n, std::string from) : n_(n), from_(std::move(from)) {}
  std::size_t size() const noexcept override { return n_; }
  int label(std::size_t) const override { return -1; }
  std::string name(std::size_t i) const override { return from_ + "#" + std::to_string(i); }
  Sample read(std::size_t i) const override {
    Sample sample;
    sample.index = i;
    sample.name = name(i);
    return sample;
  }

 private:
  std::size_t n_;
  std::string from_;
};

// "counted n=<int>": any path ending in .count, which need not exist.
DatasetEntry counted_entry(int guess_order = 100) {
  return {.name = "counted",
          .doc = "n items of nothing",
          .params = {{"n", "int", "3", "how many"}},
          .open = [](const fs::path& path, const Params& p) -> DatasetPtr {
            return std::make_shared<Counted>(static_cast<std::size_t>(p.get_int("n", 3)), path.string());
          },
          .takes = DataPath::any,
          .recognise = [](const fs::path& path, fs::file_status) { return path.extension() == ".count"; },
          .guess_order = guess_order};
}

void image_folder(const fs::path& root) {
  for (const char* cls : {"cat", "dog"}) test::write_bytes(root / cls / "a.jpg", test::small_jpeg(1));
}

TEST(DatasetRegistry, BuiltinFormatsAreListedWithTheirParameters) {
  const DatasetRegistry& formats = DatasetRegistry::builtin();
  EXPECT_EQ(formats.names(),
            (std::vector<std::string>{"cifar", "coco", "filelist", "folder", "packed", "segmentation", "tar"}));
  EXPECT_EQ(formats.choices(), "auto, cifar, coco, filelist, folder, packed, segmentation, tar");
  const std::string help = formats.help();
  EXPECT_THAT(help, HasSubstr("coco  COCO detection data"));
  EXPECT_THAT(help, HasSubstr("annotations=<string>  required."));
  EXPECT_THAT(help, HasSubstr("split=<string>   default train. train or test"));
}

TEST(DatasetRegistry, GuessesAFolderAndOpensItByName) {
  const TempDir dir;
  image_folder(dir / "photos");
  const DatasetRegistry& formats = DatasetRegistry::builtin();
  EXPECT_EQ(formats.open(dir / "photos")->size(), 2u);
  EXPECT_EQ(formats.open(dir / "photos", "auto")->size(), 2u);
  EXPECT_EQ(formats.open(dir / "photos", "  folder ")->classes(), (std::vector<std::string>{"cat", "dog"}));
  EXPECT_THAT(test::error_message([&] { formats.open(dir / "photos", "packed"); }),
              HasSubstr("photos: --format packed needs a file"));
  EXPECT_THAT(test::error_message([&] { formats.open(dir / "nothing"); }),
              HasSubstr("nothing: no such file or folder (give an image folder"));
  EXPECT_THAT(test::error_message([&] { formats.open(dir / "nothing", "folder"); }),
              HasSubstr("nothing: no such file or folder (the folder format takes a folder)"));
}

TEST(DatasetRegistry, UnknownFormatsAndBadParametersAreNamed) {
  const DatasetRegistry& formats = DatasetRegistry::builtin();
  EXPECT_EQ(test::error_message([&] { formats.check("zip"); }),
            "unknown data format 'zip'; known: cifar, coco, filelist, folder, packed, segmentation, tar");
  EXPECT_THAT(test::error_message([&] { formats.check("folders"); }), HasSubstr("did you mean 'folder'?"));
  EXPECT_THAT(test::error_message([&] { formats.check("coco"); }),
              HasSubstr("coco: missing required parameter 'annotations' in 'coco'; coco takes: annotations (string, "
                        "required), crowd (bool, default true), empty (bool, default true)"));
  EXPECT_THAT(test::error_message([&] { formats.check("cifar fold=1"); }),
              HasSubstr("cifar: unknown parameter 'fold'; cifar takes: split"));
  EXPECT_THAT(test::error_message([&] { formats.check("coco annotations=a.json crowd=maybe"); }),
              HasSubstr("coco: parameter crowd='maybe' is not"));
  EXPECT_THAT(test::error_message([&] { formats.check("coco annotations"); }),
              HasSubstr("data format spec 'coco annotations': 'annotations' is not key=value"));
  EXPECT_EQ(test::error_message([&] { formats.check("cifar split=test"); }), "");
  EXPECT_EQ(test::error_message([&] { formats.check(""); }), "");
  EXPECT_EQ(test::error_message([&] { formats.check("auto"); }), "");
}

TEST(DatasetRegistry, CocoOpensByNameWithItsAnnotationsAndIsNotGuessed) {
  const TempDir dir;
  for (const char* name : {"a.jpg", "b.jpg"}) test::write_bytes(dir / "images" / name, test::small_jpeg(3, 40, 30));
  test::write_text(dir / "instances.json", R"({
    "images": [{"id": 1, "file_name": "a.jpg", "width": 40, "height": 30},
               {"id": 2, "file_name": "b.jpg", "width": 40, "height": 30}],
    "categories": [{"id": 5, "name": "cat"}],
    "annotations": [{"id": 9, "image_id": 1, "category_id": 5, "bbox": [1, 2, 3, 4], "iscrowd": 1},
                    {"id": 10, "image_id": 1, "category_id": 9, "bbox": [1, 2, 3, 4]}]})");
  const DatasetRegistry& formats = DatasetRegistry::builtin();
  const std::string spec = "coco annotations=" + (dir / "instances.json").string();
  const DatasetPtr coco = formats.open(dir / "images", spec);
  ASSERT_NE(dynamic_cast<const CocoDataset*>(coco.get()), nullptr);
  EXPECT_EQ(coco->size(), 2u);
  EXPECT_EQ(coco->classes(), std::vector<std::string>{"cat"});
  EXPECT_EQ(coco->read(0).boxes.size(), 1u);
  ASSERT_EQ(coco->ignored().size(), 1u);  // the annotation of category 9, which does not exist
  EXPECT_THAT(coco->ignored()[0].reason, HasSubstr("category"));
  // Its parameters reach it: crowd=false leaves the crowd box out, empty=false the images without one.
  EXPECT_EQ(formats.open(dir / "images", spec + " crowd=false")->read(0).boxes.size(), 0u);
  EXPECT_EQ(formats.open(dir / "images", spec + " crowd=false empty=false")->size(), 0u);
  // Guessed, a folder of images is an image folder (which wants class folders), never COCO.
  EXPECT_THAT(test::error_message([&] { formats.open(dir / "images"); }), HasSubstr("has no class folders"));
}

TEST(DatasetRegistry, AnAddedFormatOpensByNameAndByGuessInItsOrder) {
  DatasetRegistry formats;
  register_builtin_datasets(formats);
  formats.add(counted_entry());
  EXPECT_EQ(formats.open("x.count")->size(), 3u);  // recognised although no file has the name
  EXPECT_EQ(formats.open("x.count", "counted n=5")->size(), 5u);
  EXPECT_THAT(test::error_message([&] { formats.open("x.count", "counted n=five"); }),
              HasSubstr("counted: parameter n='five' is not"));
  // Another folder is still an image folder: the catch-alls come after a plugin's formats.
  const TempDir dir;
  image_folder(dir / "photos");
  EXPECT_EQ(formats.open(dir / "photos")->size(), 2u);
  // An entry guessed before the catch-alls takes what it recognises even when a file exists.
  test::write_text(dir / "list.count", "a.jpg,0\n");
  EXPECT_EQ(formats.open(dir / "list.count")->name(0), (dir / "list.count").string() + "#0");
  EXPECT_EQ(formats.choices(), "auto, cifar, coco, counted, filelist, folder, packed, segmentation, tar");
}

TEST(DatasetRegistry, AddValidatesTheEntry) {
  DatasetRegistry formats;
  formats.add(counted_entry());
  EXPECT_THAT(test::error_message([&] { formats.add(counted_entry()); }),
              HasSubstr("data format 'counted' is already registered; registered: counted"));
  DatasetEntry automatic = counted_entry();
  automatic.name = "auto";
  EXPECT_THAT(test::error_message([&] { formats.add(automatic); }), HasSubstr("'auto' is not a data format's name"));
  DatasetEntry spaced = counted_entry();
  spaced.name = "two words";
  EXPECT_THAT(test::error_message([&] { formats.add(spaced); }), HasSubstr("contain no spaces"));
  DatasetEntry no_open = counted_entry();
  no_open.name = "nothing";
  no_open.open = nullptr;
  EXPECT_THAT(test::error_message([&] { formats.add(no_open); }),
              HasSubstr("DatasetRegistry::add: data format 'nothing' has no factory"));
  DatasetEntry bad_default = counted_entry();
  bad_default.name = "bad";
  bad_default.params[0].default_value = "x";
  EXPECT_THAT(test::error_message([&] { formats.add(bad_default); }),
              HasSubstr("DatasetRegistry::add: the default of bad: parameter n='x' is not"));
  EXPECT_EQ(formats.names(), std::vector<std::string>{"counted"});
}

TEST(DatasetRegistry, AnEntryThatDoesNotReadItsParametersIsABug) {
  DatasetRegistry formats;
  DatasetEntry lazy = counted_entry();
  lazy.open = [](const fs::path& path, const Params&) -> DatasetPtr {
    return std::make_shared<Counted>(1, path.string());
  };
  formats.add(lazy);
  EXPECT_THAT(test::error_message([&] { formats.open("x.count", "counted n=2"); }),
              HasSubstr("parameter 'n' was given but the factory never read it"));
}

}  // namespace
}  // namespace stoke::nodes
