#include "stoke/nodes/shapes.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <numbers>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <stdexcept>
#include <system_error>

#include "stoke/base/atomic_file.hpp"
#include "stoke/nodes/jpeg_encode.hpp"

namespace stoke::nodes {

namespace {

using Contour = std::vector<cv::Point2d>;
constexpr double pi = std::numbers::pi;

// n points on a circle of radius r, the first at the top.
Contour regular_polygon(int n, double r, double phase = -pi / 2) {
  Contour points;
  for (int i = 0; i < n; ++i) {
    const double a = phase + 2 * pi * i / n;
    points.emplace_back(r * std::cos(a), r * std::sin(a));
  }
  return points;
}

// Points on an arc of the circle (center, r) from angle a0 to a1 (either direction).
void add_arc(Contour& points, cv::Point2d center, double r, double a0, double a1, int steps) {
  for (int i = 0; i <= steps; ++i) {
    const double a = a0 + (a1 - a0) * i / steps;
    points.emplace_back(center.x + r * std::cos(a), center.y + r * std::sin(a));
  }
}

// The shape in unit coordinates: it spans about [-1, 1] along x (the long axis). A filled shape
// is every contour filled at once, so an inner contour is a hole (the ring).
std::vector<Contour> unit_contours(ShapeKind kind) {
  switch (kind) {
    case ShapeKind::circle:
    case ShapeKind::ellipse:
      return {regular_polygon(48, 1.0)};
    case ShapeKind::square:
      return {{{-0.8, -0.8}, {0.8, -0.8}, {0.8, 0.8}, {-0.8, 0.8}}};
    case ShapeKind::triangle:
      return {regular_polygon(3, 1.0)};
    case ShapeKind::star: {
      Contour star;
      for (int i = 0; i < 10; ++i) {
        const double r = i % 2 == 0 ? 1.0 : 0.42;
        const double a = -pi / 2 + pi * i / 5;
        star.emplace_back(r * std::cos(a), r * std::sin(a));
      }
      return {star};
    }
    case ShapeKind::cross: {
      constexpr double w = 0.3;
      return {
          {{-w, -1}, {w, -1}, {w, -w}, {1, -w}, {1, w}, {w, w}, {w, 1}, {-w, 1}, {-w, w}, {-1, w}, {-1, -w}, {-w, -w}}};
    }
    case ShapeKind::ring:
      return {regular_polygon(48, 1.0), regular_polygon(48, 0.55)};
    case ShapeKind::hexagon:
      return {regular_polygon(6, 1.0)};
    case ShapeKind::pentagon:
      return {regular_polygon(5, 1.0)};
    case ShapeKind::diamond:
      return {{{0, -1}, {0.6, 0}, {0, 1}, {-0.6, 0}}};
    case ShapeKind::arrow:
      return {{{-1, -0.22}, {0.15, -0.22}, {0.15, -0.6}, {1, 0}, {0.15, 0.6}, {0.15, 0.22}, {-1, 0.22}}};
    case ShapeKind::crescent: {
      // The unit disc minus a disc of radius 0.8 centred at (0.5, 0): the outer arc runs round the
      // left from one intersection to the other, the inner arc back.
      constexpr double d = 0.5;
      constexpr double r2 = 0.8;
      const double x = (1 + d * d - r2 * r2) / (2 * d);
      const double outer = std::acos(x);
      const double inner = std::atan2(std::sqrt(1 - x * x), x - d);
      Contour points;
      add_arc(points, {0, 0}, 1.0, outer, 2 * pi - outer, 32);
      add_arc(points, {d, 0}, r2, 2 * pi - inner, inner, 24);
      return {points};
    }
  }
  throw std::invalid_argument("draw_shape: unknown shape kind " + std::to_string(static_cast<int>(kind)));
}

cv::Scalar random_colour(ItemRng& rng) {
  return cv::Scalar(static_cast<double>(rng.uniform_int(0, 255)), static_cast<double>(rng.uniform_int(0, 255)),
                    static_cast<double>(rng.uniform_int(0, 255)));
}

double distance_l1(const cv::Scalar& a, const cv::Scalar& b) {
  return std::abs(a[0] - b[0]) + std::abs(a[1] - b[1]) + std::abs(a[2] - b[2]);
}

cv::Point random_point(ItemRng& rng, int size, double margin) {
  return {static_cast<int>(std::lround(rng.uniform(-margin, size + margin))),
          static_cast<int>(std::lround(rng.uniform(-margin, size + margin)))};
}

// Background colour with a linear gradient towards a second colour in a random direction.
void paint_background(cv::Mat& image, const cv::Scalar& base, ItemRng& rng) {
  const cv::Scalar other = random_colour(rng);
  const double strength = rng.uniform(0.0, 0.6);
  const double direction = rng.uniform(0.0, 2 * pi);
  const double dx = std::cos(direction) / image.cols;
  const double dy = std::sin(direction) / image.rows;
  const double half = image.cols / 2.0;
  for (int r = 0; r < image.rows; ++r) {
    auto* row = image.ptr<cv::Vec3b>(r);
    for (int c = 0; c < image.cols; ++c) {
      const double t = std::clamp((c - half) * dx + (r - half) * dy + 0.5, 0.0, 1.0) * strength;
      for (int ch = 0; ch < 3; ++ch) row[c][ch] = cv::saturate_cast<std::uint8_t>(base[ch] * (1 - t) + other[ch] * t);
    }
  }
}

std::string two_digits(int n) { return (n < 10 ? "0" : "") + std::to_string(n); }

}  // namespace

std::string_view to_string(ShapeKind kind) noexcept {
  switch (kind) {
    case ShapeKind::circle:
      return "circle";
    case ShapeKind::square:
      return "square";
    case ShapeKind::triangle:
      return "triangle";
    case ShapeKind::star:
      return "star";
    case ShapeKind::cross:
      return "cross";
    case ShapeKind::ring:
      return "ring";
    case ShapeKind::ellipse:
      return "ellipse";
    case ShapeKind::hexagon:
      return "hexagon";
    case ShapeKind::pentagon:
      return "pentagon";
    case ShapeKind::diamond:
      return "diamond";
    case ShapeKind::arrow:
      return "arrow";
    case ShapeKind::crescent:
      return "crescent";
  }
  return "unknown";
}

std::vector<ShapeClass> shape_classes(int count) {
  if (count < 1 || count > max_shape_classes)
    throw std::invalid_argument("shapes: " + std::to_string(count) + " classes asked for; there are 1 to " +
                                std::to_string(max_shape_classes) + " (" + std::to_string(shape_kind_count) +
                                " shapes, filled and outlined)");
  std::vector<ShapeClass> classes;
  for (int i = 0; i < count; ++i) {
    ShapeClass c;
    c.kind = static_cast<ShapeKind>(i % shape_kind_count);
    c.filled = i < shape_kind_count;
    c.name = two_digits(i) + "_" + std::string(to_string(c.kind)) + (c.filled ? "" : "_outline");
    classes.push_back(std::move(c));
  }
  return classes;
}

void draw_shape(cv::Mat& image, const ShapeClass& shape, const ShapeParams& p) {
  if (image.type() != CV_8UC3) throw std::invalid_argument("draw_shape: needs a CV_8UC3 image");
  constexpr int shift = 4;  // sub-pixel bits: smooth edges for small shapes
  constexpr double one = 1 << shift;
  const double aspect = p.aspect * (shape.kind == ShapeKind::ellipse ? 0.55 : 1.0);
  const double cos_a = std::cos(p.angle);
  const double sin_a = std::sin(p.angle);
  std::vector<std::vector<cv::Point>> contours;
  for (const Contour& unit : unit_contours(shape.kind)) {
    std::vector<cv::Point>& out = contours.emplace_back();
    for (const cv::Point2d& q : unit) {
      const double x = q.x * p.radius;
      const double y = q.y * p.radius * aspect;
      out.emplace_back(static_cast<int>(std::lround((p.center.x + x * cos_a - y * sin_a) * one)),
                       static_cast<int>(std::lround((p.center.y + x * sin_a + y * cos_a) * one)));
    }
  }
  if (shape.filled) {
    cv::fillPoly(image, contours, p.colour, cv::LINE_AA, shift);
  } else {
    const int thickness = std::max(1, static_cast<int>(std::lround(p.thickness)));
    cv::polylines(image, contours, /*isClosed=*/true, p.colour, thickness, cv::LINE_AA, shift);
  }
}

cv::Mat render_shape_image(const ShapeClass& shape, int size, ItemRng& rng) {
  if (size < 16) throw std::invalid_argument("shapes: image size " + std::to_string(size) + " is below 16 pixels");
  cv::Mat image(size, size, CV_8UC3);
  const cv::Scalar background = random_colour(rng);
  paint_background(image, background, rng);

  // Clutter under the shape: soft blobs and lines of other colours.
  const auto blobs = rng.uniform_int(2, 5);
  for (std::int64_t i = 0; i < blobs; ++i) {
    const cv::Point center = random_point(rng, size, 0);
    const cv::Size axes(static_cast<int>(size * rng.uniform(0.04, 0.16)) + 1,
                        static_cast<int>(size * rng.uniform(0.04, 0.16)) + 1);
    cv::ellipse(image, center, axes, rng.uniform(0, 180), 0, 360, random_colour(rng), cv::FILLED, cv::LINE_AA);
  }
  const auto lines = rng.uniform_int(2, 6);
  for (std::int64_t i = 0; i < lines; ++i) {
    const cv::Point a = random_point(rng, size, size * 0.1);
    const cv::Point b = random_point(rng, size, size * 0.1);
    const int thickness = static_cast<int>(rng.uniform_int(1, std::max(1, size / 32)));
    cv::line(image, a, b, random_colour(rng), thickness, cv::LINE_AA);
  }
  const double blur = size * rng.uniform(0.008, 0.025) + 0.5;
  cv::GaussianBlur(image, image, cv::Size(0, 0), blur);

  // The shape, in a colour that stands out from the background's base colour.
  ShapeParams params;
  params.colour = random_colour(rng);
  for (int tries = 0; tries < 16 && distance_l1(params.colour, background) < 180; ++tries)
    params.colour = random_colour(rng);
  if (distance_l1(params.colour, background) < 180)
    params.colour = cv::Scalar(255 - background[0], 255 - background[1], 255 - background[2]);
  params.radius = size * rng.uniform(0.22, 0.4);
  const double margin = params.radius * 0.6;
  params.center = {rng.uniform(margin, size - margin), rng.uniform(margin, size - margin)};
  params.angle = rng.uniform(0, 2 * pi);
  params.aspect = rng.uniform(0.85, 1.0);
  params.thickness = std::max(1.5, params.radius * rng.uniform(0.1, 0.18));
  draw_shape(image, shape, params);

  // A few thin lines across everything, then noise.
  const auto occluders = rng.uniform_int(0, 2);
  for (std::int64_t i = 0; i < occluders; ++i)
    cv::line(image, random_point(rng, size, 0), random_point(rng, size, 0), random_colour(rng), 1, cv::LINE_AA);
  cv::RNG noise_rng(rng());  // a local generator: no global or thread-local state
  cv::Mat noise(size, size, CV_16SC3);
  noise_rng.fill(noise, cv::RNG::NORMAL, 0, rng.uniform(2.0, 8.0));
  cv::Mat wide;
  image.convertTo(wide, CV_16SC3);
  wide += noise;
  wide.convertTo(image, CV_8UC3);  // saturates
  return image;
}

namespace {

namespace fs = std::filesystem;

std::string six_digits(std::size_t n) {
  std::string digits = std::to_string(n);
  return std::string(digits.size() < 6 ? 6 - digits.size() : 0, '0') + digits;
}

// Makes sure `out` may be written: absent, or an empty directory, or (with force) a directory
// whose train/ and val/ are removed.
void prepare_root(const ShapesDatasetOptions& o) {
  std::error_code error;
  const auto status = fs::status(o.out, error);
  if (fs::exists(status)) {
    if (!fs::is_directory(status))
      throw std::runtime_error("shapes dataset: " + o.out.string() + " exists and is not a directory");
    if (!fs::is_empty(o.out)) {
      if (!o.force)
        throw std::runtime_error("shapes dataset: " + o.out.string() +
                                 " is not empty; use --force (ShapesDatasetOptions::force) to replace its train/ "
                                 "and val/");
      for (const char* split : {"train", "val"}) {
        fs::remove_all(o.out / split, error);
        if (error)
          throw std::runtime_error("shapes dataset: cannot remove " + (o.out / split).string() + ": " +
                                   error.message());
      }
    }
  }
}

}  // namespace

ShapesDatasetReport write_shapes_dataset(const ShapesDatasetOptions& o, const ShapesProgress& progress) {
  const std::vector<ShapeClass> classes = shape_classes(o.classes);
  if (o.out.empty()) throw std::invalid_argument("shapes dataset: no output directory given");
  if (o.size < 16 || o.size > 4096)
    throw std::invalid_argument("shapes dataset: size " + std::to_string(o.size) + " is outside 16..4096");
  if (o.quality < 1 || o.quality > 100)
    throw std::invalid_argument("shapes dataset: quality " + std::to_string(o.quality) + " is outside 1..100");
  if (o.train_per_class == 0) throw std::invalid_argument("shapes dataset: at least 1 training image per class");
  if (o.threads < 0) throw std::invalid_argument("shapes dataset: threads must be >= 0");
  prepare_root(o);

  struct Split {
    ShapesSplit id;
    const char* name;
    std::size_t per_class;
  };
  std::vector<Split> splits{{ShapesSplit::train, "train", o.train_per_class}};
  if (o.val_per_class > 0) splits.push_back({ShapesSplit::val, "val", o.val_per_class});
  std::size_t total = 0;
  for (const Split& split : splits) {
    total += split.per_class * classes.size();
    for (const ShapeClass& c : classes) {
      const fs::path dir = o.out / split.name / c.name;
      std::error_code error;
      fs::create_directories(dir, error);
      if (error) throw std::runtime_error("shapes dataset: cannot create " + dir.string() + ": " + error.message());
    }
  }

  std::atomic<std::size_t> done{0};
  std::atomic<std::uintmax_t> bytes{0};
  std::mutex progress_mutex;
  std::size_t reported = 0;  // guarded by progress_mutex
  const std::size_t step = std::max<std::size_t>(1, total / 200);

  tbb::task_arena arena(o.threads > 0 ? o.threads : tbb::task_arena::automatic);
  for (const Split& split : splits) {
    const std::size_t count = split.per_class * classes.size();
    arena.execute([&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count), [&](const tbb::blocked_range<std::size_t>& range) {
        for (std::size_t i = range.begin(); i != range.end(); ++i) {
          const ShapeClass& c = classes[i / split.per_class];
          ItemRng rng = shapes_rng(o.seed, split.id, i);
          const std::vector<std::byte> jpeg = encode_jpeg(render_shape_image(c, o.size, rng), o.quality);
          base::write_file_atomically(o.out / split.name / c.name / (six_digits(i % split.per_class) + ".jpg"), jpeg,
                                       "shapes image");
          bytes.fetch_add(jpeg.size(), std::memory_order_relaxed);
          const std::size_t now = done.fetch_add(1, std::memory_order_relaxed) + 1;
          if (progress && now % step == 0 && now < total) {
            std::lock_guard lock(progress_mutex);
            if (now > reported) {
              reported = now;
              progress(now, total);
            }
          }
        }
      });
    });
  }
  if (progress) progress(total, total);

  ShapesDatasetReport report;
  report.train_images = o.train_per_class * classes.size();
  report.val_images = o.val_per_class * classes.size();
  report.bytes = bytes.load();
  for (const ShapeClass& c : classes) report.classes.push_back(c.name);
  return report;
}

}  // namespace stoke::nodes
