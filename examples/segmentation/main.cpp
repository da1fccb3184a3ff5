// Segmentation input: image + mask pairs from a SegmentationFolder, cropped and flipped together
// (one random geometry per sample: the pixels resampled bilinearly, the mask by nearest neighbour),
// then collated into batches that carry each item's mask beside its pixels.
//
//   stoke_example_segmentation [--data DIR] [--batch N] [--size N] [--epochs N] [--seed N]
//
//   source "order" -> map "read" (parallel) -> map "decode" (parallel, ordered)
//     -> emit "batch" (serial, ordered) -> sink "check" (serial)
//
// Without --data it first writes a synthetic dataset (filled shapes, one colour per class) to a
// temporary folder, and the sink then checks that every pixel well inside a region of the mask
// has that class's colour: if the mask stopped following the image, the run fails.
#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "stoke/graph/graph.hpp"
#include "stoke/nodes/collate.hpp"
#include "stoke/nodes/dataset.hpp"
#include "stoke/nodes/decode_augment.hpp"
#include "stoke/nodes/jpeg_encode.hpp"
#include "stoke/nodes/opencv_codec.hpp"
#include "stoke/nodes/registry.hpp"
#include "stoke/nodes/segmentation_folder.hpp"

namespace {

namespace fs = std::filesystem;
namespace sg = stoke::graph;
namespace sn = stoke::nodes;

constexpr std::string_view usage = R"(usage: stoke_example_segmentation [options]

Reads image + mask pairs, crops and flips each pair with one random geometry, batches them with
the masks beside the pixels, and checks every batch.

  --data DIR    a segmentation folder: DIR/images/*.jpg|png with DIR/masks/*.png of the same
                names (one channel of class ids). Default: write a synthetic dataset of 24
                images to a temporary folder, and check that masks and pixels still agree.
  --batch N     items per batch (default 8)
  --size N      the crop's output size, N x N pixels (default 64)
  --epochs N    passes over the dataset (default 2)
  --seed N      seed of the order and the augmentation (default 1)
  --help        this text
)";

struct Options {
  std::optional<fs::path> data;
  std::size_t batch = 8;
  int size = 64;
  std::uint32_t epochs = 2;
  std::uint64_t seed = 1;
};

// The synthetic classes' colours (RGB); class 0 is the background.
using Rgb = std::array<std::uint8_t, 3>;
constexpr std::array<Rgb, 5> class_colours{{{40, 40, 40}, {220, 40, 40}, {40, 200, 60}, {50, 80, 230}, {240, 220, 40}}};
constexpr int colour_tolerance = 48;  // per channel: JPEG error and bilinear mixing well inside a region

cv::Scalar scalar(const Rgb& c) { return cv::Scalar(c[0], c[1], c[2]); }

// Writes `count` pairs to root/images/NNN.jpg and root/masks/NNN.png: a few filled rectangles and
// circles of classes 1..4, each drawn once into the image (its colour) and once into the mask
// (its class id), without anti-aliasing, so that both hold the same regions.
void write_synthetic(const fs::path& root, int count, std::uint64_t seed) {
  fs::create_directories(root / "images");
  fs::create_directories(root / "masks");
  const auto write = [](const fs::path& path, std::span<const std::byte> bytes) {
    std::ofstream file(path, std::ios::binary);
    file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!file) throw std::runtime_error(path.string() + ": cannot write (is the temporary folder writable?)");
  };
  std::mt19937_64 rng(seed);
  const auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int i = 0; i < count; ++i) {
    cv::Mat image(72, 96, CV_8UC3, scalar(class_colours[0]));
    cv::Mat mask(72, 96, CV_8UC1, cv::Scalar(0));
    for (int shape = uniform(2, 4); shape > 0; --shape) {
      const int id = uniform(1, 4);
      const cv::Point centre(uniform(10, 86), uniform(10, 62));
      const int r = uniform(8, 20);
      const cv::Scalar colour = scalar(class_colours[static_cast<std::size_t>(id)]);
      if (uniform(0, 1) == 0) {
        const cv::Rect box(centre - cv::Point(r, r * 2 / 3), cv::Size(2 * r, r * 4 / 3));
        cv::rectangle(image, box, colour, cv::FILLED, cv::LINE_8);
        cv::rectangle(mask, box, cv::Scalar(id), cv::FILLED, cv::LINE_8);
      } else {
        cv::circle(image, centre, r, colour, cv::FILLED, cv::LINE_8);
        cv::circle(mask, centre, r, cv::Scalar(id), cv::FILLED, cv::LINE_8);
      }
    }
    std::vector<std::uint8_t> png;
    if (!cv::imencode(".png", mask, png)) throw std::runtime_error("OpenCV cannot encode PNG");
    const std::string name = std::to_string(1000 + i).substr(1);  // 000, 001, ...
    write(root / "images" / (name + ".jpg"), sn::encode_jpeg(image, 95));
    write(root / "masks" / (name + ".png"), std::as_bytes(std::span(png)));
  }
}

// What the sink saw. Only the (serial) sink writes it; main reads it after run() returns.
struct Totals {
  std::uint64_t items = 0;
  std::uint64_t batches = 0;
  std::map<std::int64_t, std::uint64_t> classes;  // mask pixels per class id
  std::uint64_t checked = 0;                      // pixels compared with their class's colour
  std::uint64_t mismatches = 0;
};

// Counts the classes of each item's mask (of class ids of type T) and, with `colours`, compares
// every pixel well inside a region of one class with its class's colour.
template <class T>
void check_items(const sn::Batch& batch, int size, bool colours, Totals& totals) {
  const std::span<const T> masks = batch.mask_as<T>();
  const std::span<const std::uint8_t> pixels = batch.u8();
  const auto n = static_cast<std::size_t>(size);
  // A pixel is checked when the mask is one class for `interior` pixels around it (7x7 at size 64):
  // farther than the photo's bilinear sampling and JPEG's colour bleeding reach once enlarged.
  const int interior = std::max(3, size / 20);
  std::uint64_t checked = 0;
  std::uint64_t mismatches = 0;
  for (std::size_t item = 0; item < batch.size(); ++item) {
    const T* mask = masks.data() + item * n * n;
    const std::uint8_t* rgb = pixels.data() + item * n * n * 3;
    for (std::size_t i = 0; i < n * n; ++i) ++totals.classes[static_cast<std::int64_t>(mask[i])];
    if (!colours) continue;
    const auto at = [&](int y, int x) { return mask[static_cast<std::size_t>(y * size + x)]; };
    for (int y = interior; y < size - interior; ++y) {
      for (int x = interior; x < size - interior; ++x) {
        const T id = at(y, x);
        bool uniform = true;
        for (int dy = -interior; dy <= interior && uniform; ++dy)
          for (int dx = -interior; dx <= interior && uniform; ++dx) uniform = at(y + dy, x + dx) == id;
        if (!uniform) continue;
        if (static_cast<std::size_t>(id) >= class_colours.size())
          throw std::runtime_error(batch.names()[item] + ": class " + std::to_string(id) + " is not a synthetic class");
        const Rgb& want = class_colours[static_cast<std::size_t>(id)];
        const std::uint8_t* got = rgb + static_cast<std::size_t>(y * size + x) * 3;
        ++checked;
        for (int c = 0; c < 3; ++c) {
          if (std::abs(int{got[c]} - int{want[c]}) > colour_tolerance) {
            ++mismatches;
            break;
          }
        }
      }
    }
  }
  std::cout << "batch " << totals.batches << " (epoch " << batch.epoch() << "): " << batch.size() << " items";
  if (colours) std::cout << ", " << checked << " pixels checked, " << mismatches << " mismatches";
  std::cout << '\n';
  totals.checked += checked;
  totals.mismatches += mismatches;
}

// Throws when the batch has no masks or is not `size` x `size` RGB.
void check(const sn::Batch& batch, int size, bool colours, Totals& totals) {
  const sn::BatchShape& shape = batch.shape();
  if (!batch.has_mask() || shape.height != size || shape.width != size || shape.channels != 3 ||
      shape.pixel_type != sn::ElementType::u8)
    throw std::runtime_error("batch " + std::to_string(totals.batches) + " is " + shape.describe() + ", expected " +
                             std::to_string(size) + "x" + std::to_string(size) + "x3 u8 with masks");
  if (*shape.mask == sn::ElementType::u8)
    check_items<std::uint8_t>(batch, size, colours, totals);
  else if (*shape.mask == sn::ElementType::u16)
    check_items<std::uint16_t>(batch, size, colours, totals);
  else
    check_items<std::int32_t>(batch, size, colours, totals);
  totals.items += batch.size();
  ++totals.batches;
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
    if (option == "--data")
      options.data = fs::path(value);
    else if (option == "--batch")
      options.batch = parse_number<std::size_t>(option, value, 1);
    else if (option == "--size")
      options.size = parse_number<int>(option, value, 8);
    else if (option == "--epochs")
      options.epochs = parse_number<std::uint32_t>(option, value, 1);
    else if (option == "--seed")
      options.seed = parse_number<std::uint64_t>(option, value, 0);
    else
      throw std::invalid_argument("unknown option '" + std::string(option) + "' (see --help)");
  }
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
    TempFolder synthetic;
    fs::path root;
    if (options.data) {
      root = *options.data;
    } else {
      synthetic.path = fs::temp_directory_path() / ("stoke-segmentation-" + std::to_string(std::random_device{}()));
      write_synthetic(synthetic.path, 24, options.seed);
      root = synthetic.path;
      std::cout << "example: wrote 24 image + mask pairs to " << root.string() << '\n';
    }
    const auto dataset = std::make_shared<const sn::SegmentationFolder>(root);

    // Photos become 8-bit RGB; masks are decoded as stored (DecodeColor::keep), so class ids
    // above 255 in a 16-bit PNG survive.
    sn::DecodeOptions decode_options;
    decode_options.other_formats = sn::opencv_codec(sn::DecodeColor::keep);
    // scale=0.25:1 (torchvision's default is 0.08:1) keeps the enlargement of a crop moderate, so
    // that a pixel well inside a region of the output is well inside it in the photo too.
    const std::string size = std::to_string(options.size);
    const std::vector<std::string> specs{"random_resized_crop size=" + size + " scale=0.25:1",
                                         "random_horizontal_flip"};
    const sn::DecodeAugment decode(sn::Decoder(decode_options),
                                   sn::Augment(sn::Registry::builtin().make_list(specs), options.seed));
    // The batch's shape (pixels, mask type) is the first item's, as it comes out of decode.
    const sn::BatchPool pool(sn::shape_of(decode(dataset->read(0)), options.batch), 4);
    std::cout << "example: " << dataset->size() << " pairs in " << root.string() << ", batches of "
              << pool.shape().describe() << '\n';

    const int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const bool colours = !options.data;
    sg::SignalStop signal_guard;  // SIGINT/SIGTERM stop the pipeline instead of the process
    sg::Pipeline pipeline({.max_in_flight = 64, .stop_on_signal = true});
    Totals totals;
    pipeline.source("order", sn::DatasetSource(dataset->size(), {.seed = options.seed}, options.epochs))
        .map("read", sn::ReadSample(dataset), {.concurrency = sg::parallel(workers)})
        .map("decode", decode, {.concurrency = sg::parallel(workers), .ordered = true})
        .emit<sn::Batch>("batch", sn::Collate(pool), sn::Collate::stage_options())
        .sink("check", [&](sn::Batch batch) { check(batch, options.size, colours, totals); },
              {.concurrency = sg::serial()});

    const sg::RunReport report = pipeline.run();
    sg::print(std::cout, report);
    if (report.stopped || report.cancelled) {
      std::cerr << "example: interrupted after " << totals.items << " items\n";
      return 130;
    }

    std::cout << "example: " << totals.items << " items in " << totals.batches << " batches; mask pixels by class:";
    for (const auto& [id, count] : totals.classes) std::cout << ' ' << id << '=' << count;
    std::cout << '\n';
    if (totals.items != dataset->size() * options.epochs)
      throw std::runtime_error("the sink saw " + std::to_string(totals.items) + " items, expected " +
                               std::to_string(dataset->size() * options.epochs));
    if (!colours) {
      std::cout << "example: colours not checked (only the synthetic dataset's classes have known colours)\n";
      return 0;
    }
    std::cout << "example: " << totals.checked << " interior pixels checked against their class's colour, "
              << totals.mismatches << " mismatches\n";
    // JPEG leaves a stray pixel or two; a mask that does not follow its image misses by far more.
    if (totals.checked == 0 || totals.mismatches * 1000 > totals.checked)
      throw std::runtime_error("the masks do not follow the images: " + std::to_string(totals.mismatches) + " of " +
                               std::to_string(totals.checked) + " interior pixels have another class's colour");
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "example: " << error.what() << '\n';
    return 1;
  }
}
