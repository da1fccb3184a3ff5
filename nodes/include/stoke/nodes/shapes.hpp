// The shapes dataset: procedurally drawn shapes on cluttered backgrounds, one shape per class,
// written as an ImageFolder of real JPEG files. What `stoke gen-shapes` makes, so that training
// can be tried end to end without downloading anything: a small CNN learns it within minutes, but
// random colours, sizes, positions, rotations, clutter and noise keep it from being trivial.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <opencv2/core/mat.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "stoke/nodes/random.hpp"

namespace stoke::nodes {

/// The outline a class draws.
enum class ShapeKind : std::uint8_t {
  circle,
  square,
  triangle,
  star,
  cross,
  ring,
  ellipse,
  hexagon,
  pentagon,
  diamond,
  arrow,
  crescent,
};
inline constexpr int shape_kind_count = 12;

/// "circle", "square", ...
std::string_view to_string(ShapeKind kind) noexcept;

/// One class: a kind of shape, drawn filled or as an outline.
struct ShapeClass {
  ShapeKind kind = ShapeKind::circle;
  bool filled = true;
  /// The class folder's name: the class index, two digits, then the shape, e.g. "00_circle",
  /// "13_square_outline"; sorting the names gives the class order.
  std::string name;
};

/// The most classes there are: every kind filled, then every kind as an outline.
inline constexpr int max_shape_classes = 2 * shape_kind_count;

/// The first `count` classes: the 12 kinds filled (0..11), then the same kinds as outlines
/// (12..23). Throws std::invalid_argument unless 1 <= count <= max_shape_classes.
std::vector<ShapeClass> shape_classes(int count);

/// Where and how to draw one shape, in pixels and radians.
struct ShapeParams {
  cv::Point2d center;
  double radius = 10;  ///< half the extent of the shape's longer axis
  double angle = 0;    ///< rotation, radians
  double aspect = 1;   ///< the shorter axis relative to the longer (an ellipse's is further reduced)
  cv::Scalar colour{255, 255, 255};
  double thickness = 2;  ///< line width of outlines, pixels
};

/// Draws `shape` onto `image` (CV_8UC3) in place, anti-aliased. Pure: the same arguments give the
/// same pixels.
void draw_shape(cv::Mat& image, const ShapeClass& shape, const ShapeParams& params);

/// One random image of `shape`, `size` x `size` RGB (CV_8UC3): a blurred background of random
/// colour with blobs and lines, the shape in a contrasting colour at a random place, size and
/// rotation, a few lines across it, and sensor-like noise. A function of `rng`'s state only (no
/// global or thread-local state), so it is thread-safe and reproducible. Throws
/// std::invalid_argument when size < 16.
cv::Mat render_shape_image(const ShapeClass& shape, int size, ItemRng& rng);

/// The dataset's splits; the split is part of every image's random key.
enum class ShapesSplit : std::uint32_t { train = 0, val = 1 };

/// The generator of image `index` (counted across the split's classes) of `split`.
inline ItemRng shapes_rng(std::uint64_t seed, ShapesSplit split, std::uint64_t index) noexcept {
  return ItemRng(seed, static_cast<std::uint32_t>(split), index, /*stream=*/0x5348'4150'4553ULL);  // "SHAPES"
}

struct ShapesDatasetOptions {
  std::filesystem::path out;  ///< the dataset's root: out/train/<class>/, out/val/<class>/
  int classes = 10;           ///< 1..max_shape_classes
  std::size_t train_per_class = 1000;
  std::size_t val_per_class = 100;
  int size = 64;  ///< width and height in pixels, >= 16
  std::uint64_t seed = 0;
  int quality = 90;    ///< JPEG quality, 1..100
  bool force = false;  ///< replace out/train and out/val when `out` is not empty
  int threads = 0;     ///< 0: all cores
};

struct ShapesDatasetReport {
  std::size_t train_images = 0;
  std::size_t val_images = 0;
  std::uintmax_t bytes = 0;  ///< JPEG bytes written
  std::vector<std::string> classes;
};

/// Called with (images written, images in all), from worker threads but never concurrently, at
/// most about 200 times per run and always once at the end.
using ShapesProgress = std::function<void(std::size_t done, std::size_t total)>;

/// Writes the dataset: out/<split>/<class name>/<index within the class, 6 digits>.jpg, image i of
/// a split (class i / per_class) drawn with shapes_rng(seed, split, i), so the same options give
/// byte-identical files whatever the thread count. Images are made in parallel; each file is
/// written under a temporary name and renamed, so none is ever half-written.
///
/// Throws std::invalid_argument for bad options, std::runtime_error naming the path when `out` is
/// a non-empty directory and not `force` (or not a directory), or when a file cannot be written.
/// With `force`, out/train and out/val are deleted first; nothing else in `out` is touched.
ShapesDatasetReport write_shapes_dataset(const ShapesDatasetOptions& options, const ShapesProgress& progress = {});

}  // namespace stoke::nodes
