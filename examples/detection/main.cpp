// Detection input: images of a COCO annotation file with their boxes, cropped, flipped and resized
// (one random geometry per sample: the pixels resampled, the boxes remapped, clipped and filtered),
// then collated into batches whose boxes are padded to a fixed room per item.
//
//   stoke_example_detection [--annotations FILE --images DIR] [--batch N] [--size N] [--epochs N]
//                           [--seed N] [--max-boxes N]
//
//   source "order" -> map "read" (parallel) -> map "decode" (parallel, ordered)
//     -> emit "batch" (serial, ordered) -> sink "check" (serial)
//
// Without --annotations it first writes a synthetic COCO dataset (filled rectangles, one colour per
// category, and one annotation outside its image) to a temporary folder, and the sink then checks
// that the pixels well inside every batched box have its class's colour: if the boxes stopped
// following the image, the run fails.
#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "stoke/graph/graph.hpp"
#include "stoke/nodes/coco_dataset.hpp"
#include "stoke/nodes/collate.hpp"
#include "stoke/nodes/dataset.hpp"
#include "stoke/nodes/decode_augment.hpp"
#include "stoke/nodes/jpeg_encode.hpp"
#include "stoke/nodes/registry.hpp"

namespace {

namespace fs = std::filesystem;
namespace sg = stoke::graph;
namespace sn = stoke::nodes;

constexpr std::string_view usage = R"(usage: stoke_example_detection [options]

Reads the images of a COCO annotation file with their boxes, crops, flips and resizes each image
and its boxes with one random geometry, drops the boxes the crop cut down (filter_boxes
min_visible=0.3 min_size=2), batches them with the boxes padded to --max-boxes per item, and
checks every batch.

  --annotations FILE  a COCO annotation file (images, annotations with bbox [x, y, w, h],
                      categories); needs --images. Only structural checks are then made: box
                      counts within --max-boxes, classes valid, boxes inside the output.
                      Items with more boxes than --max-boxes are skipped and listed.
  --images DIR        the folder the file's image file_names are relative to
                      Default (neither given): write a synthetic dataset of 24 images to a
                      temporary folder, and check that the pixels inside each box still have
                      its category's colour.
  --batch N           items per batch (default 8)
  --size N            the crop's output size, N x N pixels (default 64)
  --epochs N          passes over the dataset (default 2)
  --seed N            seed of the data, the order and the augmentation (default 1)
  --max-boxes N       room for boxes per item in a batch (default 16)
  --help              this text
)";

struct Options {
  std::optional<fs::path> annotations;
  std::optional<fs::path> images;
  std::size_t batch = 8;
  int size = 64;
  std::uint32_t epochs = 2;
  std::uint64_t seed = 1;
  std::size_t max_boxes = 16;
};

// The synthetic categories: COCO ids need not be contiguous; a box's class is its category's
// position in id order, which is this table's order.
using Rgb = std::array<std::uint8_t, 3>;
struct Category {
  int id;
  const char* name;
  Rgb colour;
};
constexpr std::array<Category, 3> categories{
    {{1, "red", {220, 40, 40}}, {2, "green", {40, 200, 60}}, {5, "blue", {50, 80, 230}}}};
constexpr Rgb background{30, 30, 30};
constexpr int colour_tolerance = 48;  // per channel: JPEG error and bilinear mixing inside a box
constexpr float inner_margin = 2.0f;  // pixels each side of a box left out of its check
constexpr double min_matching = 0.8;  // share of a box's inner pixels that must have its colour

// Writes `count` JPEGs of 120x90 to root/images/NNN.jpg, each with 1-4 non-overlapping filled
// rectangles, and root/annotations.json holding exactly those rectangles -- plus one annotation
// reaching outside its image, which CocoDataset leaves out and lists in ignored().
fs::path write_synthetic(const fs::path& root, int count, std::uint64_t seed) {
  constexpr int width = 120, height = 90;
  fs::create_directories(root / "images");
  std::mt19937_64 rng(seed);
  const auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  nlohmann::json coco{{"images", nlohmann::json::array()},
                      {"annotations", nlohmann::json::array()},
                      {"categories", nlohmann::json::array()}};
  for (const Category& c : categories) coco["categories"].push_back({{"id", c.id}, {"name", c.name}});
  const auto annotate = [&coco](int image_id, int category_id, const cv::Rect& r) {
    const std::size_t id = coco["annotations"].size() + 1;
    coco["annotations"].push_back({{"id", id},
                                   {"image_id", image_id},
                                   {"category_id", category_id},
                                   {"bbox", {r.x, r.y, r.width, r.height}},
                                   {"iscrowd", 0}});
  };
  for (int i = 0; i < count; ++i) {
    cv::Mat image(height, width, CV_8UC3, cv::Scalar(background[0], background[1], background[2]));
    std::vector<cv::Rect> placed;
    for (int tries = 0, wanted = uniform(1, 4); tries < 200 && static_cast<int>(placed.size()) < wanted; ++tries) {
      const cv::Rect r(uniform(0, width - 14), uniform(0, height - 12), uniform(14, 45), uniform(12, 35));
      const cv::Rect grown(r.x - 3, r.y - 3, r.width + 6, r.height + 6);  // a gap between rectangles
      if (r.br().x > width || r.br().y > height ||
          std::any_of(placed.begin(), placed.end(), [&](const cv::Rect& p) { return (p & grown).area() > 0; }))
        continue;
      placed.push_back(r);
      const Category& c = categories[static_cast<std::size_t>(uniform(0, categories.size() - 1))];
      image(r).setTo(cv::Scalar(c.colour[0], c.colour[1], c.colour[2]));
      annotate(i + 1, c.id, r);
    }
    const std::string name = std::to_string(1000 + i).substr(1) + ".jpg";  // 000.jpg, 001.jpg, ...
    const std::vector<std::byte> jpeg = sn::encode_jpeg(image, 95);
    std::ofstream file(root / "images" / name, std::ios::binary);
    file.write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
    if (!file) throw std::runtime_error((root / "images" / name).string() + ": cannot write");
    coco["images"].push_back({{"id", i + 1}, {"file_name", name}, {"width", width}, {"height", height}});
  }
  annotate(1, categories[0].id, cv::Rect(100, 70, 40, 40));
  const fs::path annotations = root / "annotations.json";
  std::ofstream file(annotations);
  file << coco.dump(1) << '\n';
  if (!file) throw std::runtime_error(annotations.string() + ": cannot write");
  return annotations;
}

// What the sink saw. Only the (serial) sink writes it; main reads it after run() returns.
struct Totals {
  std::uint64_t items = 0;
  std::uint64_t batches = 0;
  std::uint64_t boxes = 0;       // real boxes in the batches
  std::uint64_t checked = 0;     // boxes whose inner pixels were compared with their class's colour
  std::uint64_t mismatches = 0;  // of those, boxes with less than min_matching of them matching
};

// Throws when the batch is not size x size RGB with room for max_boxes, or holds a box count
// outside [0, max_boxes], a class outside [0, classes), a box outside the output or inverted, or a
// padding entry whose class is not -1. With `colours`, compares the pixels inside each box.
void check(const sn::Batch& batch, int size, std::size_t max_boxes, std::size_t classes, bool colours, Totals& totals) {
  const sn::BatchShape& shape = batch.shape();
  const std::string where = "batch " + std::to_string(totals.batches);
  if (shape.height != size || shape.width != size || shape.channels != 3 || shape.pixel_type != sn::ElementType::u8 ||
      shape.max_boxes != max_boxes)
    throw std::runtime_error(where + " is " + shape.describe() + ", expected " + std::to_string(size) + "x" +
                             std::to_string(size) + "x3 u8 with room for " + std::to_string(max_boxes) + " boxes");
  const std::span<const std::uint8_t> pixels = batch.u8();
  const std::span<const float> corners = batch.boxes();
  const std::span<const std::int32_t> box_classes = batch.box_classes();
  std::uint64_t boxes = 0, checked = 0, mismatches = 0;
  for (std::size_t item = 0; item < batch.size(); ++item) {
    const std::string who = where + ", " + batch.names()[item] + ": ";
    const std::int32_t count = batch.box_counts()[item];
    if (count < 0 || static_cast<std::size_t>(count) > max_boxes)
      throw std::runtime_error(who + std::to_string(count) + " boxes, room for " + std::to_string(max_boxes));
    const std::uint8_t* rgb = pixels.data() + item * shape.item_elements();
    for (std::size_t b = 0; b < max_boxes; ++b) {
      const std::int32_t cls = box_classes[item * max_boxes + b];
      const float* c = &corners[(item * max_boxes + b) * 4];
      const auto fail = [&](const std::string& what) {
        throw std::runtime_error(who + "box " + std::to_string(b) + " [" + std::to_string(c[0]) + ", " +
                                 std::to_string(c[1]) + ", " + std::to_string(c[2]) + ", " + std::to_string(c[3]) +
                                 "] of class " + std::to_string(cls) + " " + what);
      };
      if (b >= static_cast<std::size_t>(count)) {
        if (cls != -1) fail("is padding, whose class should be -1");
        continue;
      }
      if (cls < 0 || static_cast<std::size_t>(cls) >= classes) fail("has no such class");
      if (!(c[0] >= 0 && c[1] >= 0 && c[0] <= c[2] && c[1] <= c[3] && c[2] <= size && c[3] <= size))
        fail("is not inside the output");
      ++boxes;
      // Pixel (x, y) covers [x, x+1] x [y, y+1]: those wholly inside the box shrunk by the margin.
      const auto inner = [](float from, float to) {
        return std::pair(static_cast<int>(std::ceil(from + inner_margin)),
                         static_cast<int>(std::floor(to - inner_margin)));
      };
      const auto [x0, x1] = inner(c[0], c[2]);
      const auto [y0, y1] = inner(c[1], c[3]);
      if (!colours || x1 - x0 < 2 || y1 - y0 < 2) continue;  // too small to say
      const Rgb& want = categories[static_cast<std::size_t>(cls)].colour;
      std::uint64_t matching = 0;
      for (int y = y0; y < y1; ++y) {
        for (int x = x0; x < x1; ++x) {
          const std::uint8_t* got = rgb + static_cast<std::size_t>(y * size + x) * 3;
          const auto near = [&](int k) { return std::abs(int{got[k]} - int{want[k]}) <= colour_tolerance; };
          matching += near(0) && near(1) && near(2);
        }
      }
      ++checked;
      if (static_cast<double>(matching) < min_matching * (x1 - x0) * (y1 - y0)) ++mismatches;
    }
  }
  std::cout << where << " (epoch " << batch.epoch() << "): " << batch.size() << " items, " << boxes << " boxes";
  if (colours) std::cout << ", " << checked << " checked, " << mismatches << " mismatches";
  std::cout << '\n';
  totals.items += batch.size();
  ++totals.batches;
  totals.boxes += boxes;
  totals.checked += checked;
  totals.mismatches += mismatches;
}

template <class T>
T parse_number(std::string_view option, std::string_view text, T min) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value < min)
    throw std::invalid_argument(std::string(option) + " takes an integer of at least " + std::to_string(min) +
                                ", got '" + std::string(text) + "'");
  return value;
}

// nullopt for --help.
std::optional<Options> parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view option = argv[i];
    if (option == "--help" || option == "-h") return std::nullopt;
    if (i + 1 == argc) throw std::invalid_argument("'" + std::string(option) + "' needs a value (see --help)");
    const std::string_view value = argv[++i];
    if (option == "--annotations")
      options.annotations = fs::path(value);
    else if (option == "--images")
      options.images = fs::path(value);
    else if (option == "--batch")
      options.batch = parse_number<std::size_t>(option, value, 1);
    else if (option == "--size")
      options.size = parse_number<int>(option, value, 8);
    else if (option == "--epochs")
      options.epochs = parse_number<std::uint32_t>(option, value, 1);
    else if (option == "--seed")
      options.seed = parse_number<std::uint64_t>(option, value, 0);
    else if (option == "--max-boxes")
      options.max_boxes = parse_number<std::size_t>(option, value, 1);
    else
      throw std::invalid_argument("unknown option '" + std::string(option) + "' (see --help)");
  }
  if (options.annotations.has_value() != options.images.has_value())
    throw std::invalid_argument("--annotations and --images go together (see --help)");
  return options;
}

// Removes the synthetic dataset's folder when main returns, whatever happened.
struct TempFolder {
  fs::path path;
  ~TempFolder() {
    std::error_code ignored;
    if (!path.empty()) fs::remove_all(path, ignored);
  }
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::optional<Options> parsed = parse_options(argc, argv);
    if (!parsed) {
      std::cout << usage;
      return 0;
    }
    const Options& options = *parsed;
    const bool synthetic = !options.annotations;
    TempFolder temp;
    fs::path annotations, images;
    if (synthetic) {
      temp.path = fs::temp_directory_path() / ("stoke-detection-" + std::to_string(std::random_device{}()));
      annotations = write_synthetic(temp.path, 24, options.seed);
      images = temp.path / "images";
      std::cout << "example: wrote 24 images and " << annotations.string() << '\n';
    } else {
      annotations = *options.annotations;
      images = *options.images;
    }
    const auto dataset = std::make_shared<const sn::CocoDataset>(annotations, images);
    if (dataset->size() == 0) throw std::runtime_error(annotations.string() + ": no images to read");
    const std::vector<std::string>& classes = dataset->classes();

    // scale=0.3:1 keeps the enlargement of a crop moderate, so that the pixels a few pixels inside
    // a box of the output are inside it in the photo too. filter_boxes comes last: it sees what
    // the crop left of each box.
    const std::string size = std::to_string(options.size);
    const std::vector<std::string> specs{"random_resized_crop size=" + size + " scale=0.3:1", "random_horizontal_flip",
                                         "filter_boxes min_visible=0.3 min_size=2"};
    const sn::DecodeAugment decode(sn::Decoder(), sn::Augment(sn::Registry::builtin().make_list(specs), options.seed));
    // The batch's shape is the first item's as it comes out of decode, with room for --max-boxes
    // boxes of the dataset's extra values (iscrowd) whether or not that item kept any.
    sn::Sample first = dataset->read(0);
    const int extras = first.boxes.extras;
    sn::BatchShape shape = sn::shape_of(decode(std::move(first)), options.batch);
    shape.max_boxes = options.max_boxes;
    shape.box_extras = extras;
    const sn::BatchPool pool(shape, 4);
    std::cout << "example: " << dataset->size() << " images, " << dataset->boxes() << " boxes of " << classes.size()
              << " classes in " << annotations.string() << ", batches of " << pool.shape().describe() << '\n';

    const int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    std::atomic<std::uint64_t> boxes_read{0};  // boxes of the samples read, before the crop and filter
    const sn::ReadSample read(dataset);
    // With real data an item with more boxes than --max-boxes is skipped (and listed in the
    // report); on the synthetic data, which has at most 4, every item must arrive.
    sn::Collate collate(pool);
    sg::StageOptions batch_options = sn::Collate::stage_options();
    batch_options.on_error = synthetic ? sg::OnError::fail : sg::OnError::skip;
    sg::SignalStop signal_guard;  // SIGINT/SIGTERM stop the pipeline instead of the process
    sg::Pipeline pipeline({.max_in_flight = 64, .stop_on_signal = true});
    Totals totals;
    pipeline.source("order", sn::DatasetSource(dataset->size(), {.seed = options.seed}, options.epochs))
        .map("read",
             [&](sn::ItemRef ref) {
               sn::Sample sample = read(ref);
               boxes_read += sample.boxes.size();
               return sample;
             },
             {.concurrency = sg::parallel(workers)})
        .map("decode", decode, {.concurrency = sg::parallel(workers), .ordered = true})
        .emit<sn::Batch>("batch", std::move(collate), batch_options)
        .sink(
            "check",
            [&](sn::Batch batch) { check(batch, options.size, options.max_boxes, classes.size(), synthetic, totals); },
            {.concurrency = sg::serial()});

    const sg::RunReport report = pipeline.run();
    sg::print(std::cout, report);
    if (report.stopped || report.cancelled) {
      std::cerr << "example: interrupted after " << totals.items << " items\n";
      return 130;
    }

    std::cout << "example: " << totals.items << " items in " << totals.batches << " batches; " << boxes_read.load()
              << " boxes read, " << totals.boxes << " kept, " << boxes_read.load() - totals.boxes
              << " dropped by the crop and filter_boxes" << (report.skipped > 0 ? " (or with a skipped item)" : "")
              << '\n';
    std::cout << "example: annotations ignored: " << dataset->ignored().size() << '\n';
    for (const sn::IgnoredFile& ignored : dataset->ignored())
      std::cout << "  " << ignored.path << ": " << ignored.reason << '\n';
    if (totals.items + report.skipped != dataset->size() * options.epochs)
      throw std::runtime_error("the sink saw " + std::to_string(totals.items) + " items and " +
                               std::to_string(report.skipped) + " were skipped, expected " +
                               std::to_string(dataset->size() * options.epochs));
    if (report.skipped > 0)
      std::cout << "example: items skipped: " << report.skipped << " (more boxes than --max-boxes " << options.max_boxes
                << "?), listed above\n";
    if (!synthetic) {
      std::cout << "example: structure checked (box counts, classes, boxes inside the output); colours not checked "
                   "(only the synthetic dataset's classes have known colours)\n";
      return 0;
    }
    std::cout << "example: " << totals.checked << " boxes checked against their class's colour, " << totals.mismatches
              << " mismatches\n";
    // A JPEG edge may spoil a thin box now and then; boxes that do not follow their image miss by far more.
    if (totals.checked == 0 || totals.mismatches * 50 > totals.checked)
      throw std::runtime_error("the boxes do not follow the images: " + std::to_string(totals.mismatches) + " of " +
                               std::to_string(totals.checked) + " boxes hold mostly another colour");
    if (dataset->ignored().size() != 1)
      throw std::runtime_error("expected the one annotation outside its image to be ignored, got " +
                               std::to_string(dataset->ignored().size()));
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "example: " << error.what() << '\n';
    return 1;
  }
}
