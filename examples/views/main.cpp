// Two augmented views of one image, joined into a pair: the input of contrastive learning
// (SimCLR-style). Each image is drawn once; a fan-out hands a shared handle on it to two branches,
// each crops, flips and colours it with its own seed, and a join pairs the two views of the same
// image again.
//
//   stoke_example_views [images]      (default 2000)
//
//   source "index" -> map "draw" (parallel) -> fan_out "views"
//       -> map "view-a" (parallel) -+
//       -> map "view-b" (parallel) -+-> join "pair" -> sink "check" (serial, ordered)
//
// Ctrl-C stops the source; the images already in flight finish and the report is still printed.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "stoke/graph/graph.hpp"
#include "stoke/nodes/color_jitter.hpp"
#include "stoke/nodes/image.hpp"
#include "stoke/nodes/random_horizontal_flip.hpp"
#include "stoke/nodes/random_resized_crop.hpp"
#include "stoke/nodes/shapes.hpp"
#include "stoke/nodes/transform.hpp"

namespace {

namespace sg = stoke::graph;
namespace sn = stoke::nodes;

constexpr std::uint64_t default_images = 2000;
constexpr int image_size = 96;  // drawn
constexpr int view_size = 64;   // each view
constexpr std::uint64_t seed = 7;

// One view's augmentation: a random crop resized to view_size, a flip, a colour change. The crop
// comes first and writes new pixels, so the two branches never write the image they share.
sn::Augment view_augment(std::uint64_t view_seed) {
  std::vector<sn::TransformPtr> steps;
  steps.push_back(std::make_shared<sn::RandomResizedCrop>(cv::Size(view_size, view_size), sn::RandomResizedCrop::Range{0.2, 1.0}));
  steps.push_back(std::make_shared<sn::RandomHorizontalFlip>());
  steps.push_back(std::make_shared<sn::ColorJitter>(0.4, 0.4, 0.4, 0.1));
  return sn::Augment(std::move(steps), view_seed);
}

using Shared = std::shared_ptr<const sn::Image>;  // what the fan-out shares: a read-only handle, not pixels

// Throws (failing the run, naming the stage and item) unless the pair is two views of one image,
// in order, of the view size; counts the pairs whose views differ.
struct Checker {
  std::uint64_t pairs = 0;
  std::uint64_t different = 0;

  void operator()(const std::tuple<sn::Image, sn::Image>& pair) {
    const auto& [a, b] = pair;
    if (a.index != pairs || b.index != pairs)
      throw std::runtime_error("views of images " + std::to_string(a.index) + " and " + std::to_string(b.index) +
                               " arrived as pair " + std::to_string(pairs));
    if (a.label != b.label) throw std::runtime_error("the two views of one image have different labels");
    for (const sn::Image* view : {&a, &b})
      if (view->width() != view_size || view->height() != view_size)
        throw std::runtime_error("a view is " + std::to_string(view->width()) + "x" + std::to_string(view->height()));
    if (a.pixels.total() != b.pixels.total() ||
        !std::equal(a.pixels.datastart, a.pixels.dataend, b.pixels.datastart, b.pixels.dataend))
      ++different;
    ++pairs;
  }
};

std::uint64_t parse_count(int argc, char** argv) {
  if (argc < 2) return default_images;
  if (argc > 2) throw std::invalid_argument("usage: stoke_example_views [images]");
  const std::string_view text = argv[1];
  std::uint64_t count = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), count);
  if (error != std::errc{} || end != text.data() + text.size())
    throw std::invalid_argument("images must be a non-negative integer, got '" + std::string(text) + "'");
  return count;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::uint64_t count = parse_count(argc, argv);
    const int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const std::vector<sn::ShapeClass> classes = sn::shape_classes(10);
    const sn::Augment augment_a = view_augment(seed);
    const sn::Augment augment_b = view_augment(seed + 1);  // another seed: another crop of each image

    sg::SignalStop signal_guard;  // SIGINT/SIGTERM stop the pipeline instead of the process
    sg::Pipeline pipeline({.max_in_flight = 128, .stop_on_signal = true});
    Checker checker;

    auto [first, second] =
        pipeline
            .source("index",
                    [next = std::uint64_t{0}, count]() mutable -> std::optional<std::uint64_t> {
                      if (next == count) return std::nullopt;
                      return next++;
                    })
            .map("draw",
                 [&classes](std::uint64_t index) -> Shared {
                   const auto label = static_cast<int>(index % classes.size());
                   sn::ItemRng rng = sn::shapes_rng(seed, sn::ShapesSplit::train, index);
                   return std::make_shared<const sn::Image>(sn::Image{
                       .pixels = sn::render_shape_image(classes[static_cast<std::size_t>(label)], image_size, rng),
                       .label = label,
                       .index = index,
                       .name = "shape " + std::to_string(index)});
                 },
                 {.concurrency = sg::parallel(workers)})
            .fan_out("views");
    auto view_a = std::move(first).map("view-a", [&](const Shared& image) { return augment_a(*image); },
                                       {.concurrency = sg::parallel(workers)});
    auto view_b = std::move(second).map("view-b", [&](const Shared& image) { return augment_b(*image); },
                                        {.concurrency = sg::parallel(workers)});
    sg::join("pair", std::move(view_a), std::move(view_b))
        .sink("check", [&checker](std::tuple<sn::Image, sn::Image> pair) { checker(pair); },
              {.concurrency = sg::serial(), .ordered = true});  // ordered: the pairs in source order

    const sg::RunReport report = pipeline.run();
    sg::print(std::cout, report);
    if (report.stopped || report.cancelled) {
      std::cerr << "example: interrupted after " << checker.pairs << " pairs\n";
      return 130;
    }
    if (checker.pairs != count)
      throw std::runtime_error("the sink saw " + std::to_string(checker.pairs) + " pairs, expected " +
                               std::to_string(count));
    // Two random crops of one image are almost never pixel for pixel the same.
    if (count >= 10 && checker.different < count * 9 / 10)
      throw std::runtime_error("only " + std::to_string(checker.different) + " of " + std::to_string(count) +
                               " pairs had two different views");
    std::cout << "example: " << checker.pairs << " pairs of " << view_size << "x" << view_size << " views, "
              << checker.different << " with different views, in order\n";
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "example: " << error.what() << '\n';
    return 1;
  }
}
