// `stoke gen-shapes`: writes the shapes dataset (see stoke/nodes/shapes.hpp), an ImageFolder of
// JPEG files per split, for trying training end to end without downloading anything.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli.hpp"
#include "commands.hpp"
#include "status_line.hpp"
#include "stoke/nodes/shapes.hpp"

namespace stoke::app {

namespace po = boost::program_options;

int gen_shapes(int argc, char** argv) {
  nodes::ShapesDatasetOptions o;
  std::string out;
  bool json = false;
  bool quiet = false;
  CommandOptions cli("gen-shapes",
                     "Writes a synthetic image-classification dataset: one procedurally drawn shape per class\n"
                     "(circle, square, triangle, star, cross, ring, ellipse, hexagon, pentagon, diamond, arrow,\n"
                     "crescent; filled for classes 0-11, outlined for 12-23) in random colours, sizes, positions\n"
                     "and rotations on cluttered, noisy backgrounds, as JPEG files:\n"
                     "  DIR/train/<class>/NNNNNN.jpg and DIR/val/<class>/NNNNNN.jpg\n"
                     "Class folders are named 00_circle, 01_square, ...: sorted, they give the class index.\n"
                     "--train and --val count images PER CLASS. The same options give byte-identical files,\n"
                     "whatever the thread count.",
                     "--out DIR [options]");
  cli.add()("out,o", po::value(&out)->required(), "output directory (absent or empty, unless --force)")(
      "classes,k", po::value(&o.classes)->default_value(o.classes), "number of classes, 1..24")(
      "train", po::value(&o.train_per_class)->default_value(o.train_per_class), "training images per class")(
      "val", po::value(&o.val_per_class)->default_value(o.val_per_class), "validation images per class (0: no val/)")(
      "size", po::value(&o.size)->default_value(o.size), "width and height of the images, pixels (>= 16)")(
      "seed", po::value(&o.seed)->default_value(o.seed), "random seed")(
      "quality", po::value(&o.quality)->default_value(o.quality), "JPEG quality, 1..100")(
      "threads", po::value(&o.threads)->default_value(o.threads), "worker threads (0: one per core)")(
      "force", po::bool_switch(&o.force), "write into a non-empty DIR, replacing DIR/train and DIR/val")(
      "quiet,q", po::bool_switch(&quiet), "no progress on stderr")("json", po::bool_switch(&json),
                                                                   "print one JSON line instead of the summary");
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (o.classes < 1 || o.classes > nodes::max_shape_classes)
    return cli.usage_error("--classes must be in 1.." + std::to_string(nodes::max_shape_classes));
  if (o.train_per_class < 1) return cli.usage_error("--train must be at least 1");
  if (o.size < 16 || o.size > 4096) return cli.usage_error("--size must be in 16..4096");
  if (o.quality < 1 || o.quality > 100) return cli.usage_error("--quality must be in 1..100");
  if (o.threads < 0) return cli.usage_error("--threads must be >= 0");
  o.out = out;

  const Pace pace;
  StatusLine line(std::chrono::milliseconds(250), std::chrono::milliseconds(5000));
  nodes::ShapesProgress progress;
  if (!quiet && !json) {
    progress = [&](std::size_t done, std::size_t total) {
      const auto text = [&] {
        return format("gen-shapes: %zu/%zu images  %.0f images/s  ETA %.0f s", done, total, pace.rate(done),
                      pace.eta(done, total));
      };
      if (done == total) {
        line.finish(text());
      } else {
        line.show(text);
      }
    };
  }
  const nodes::ShapesDatasetReport report = nodes::write_shapes_dataset(o, progress);
  const double elapsed = pace.seconds();
  const std::size_t images = report.train_images + report.val_images;

  if (json) {
    print_json({{"out", o.out.string()},
                {"classes", o.classes},
                {"train", report.train_images},
                {"val", report.val_images},
                {"size", o.size},
                {"seed", o.seed},
                {"bytes", report.bytes},
                {"seconds", elapsed},
                {"images_per_sec", elapsed > 0 ? static_cast<double>(images) / elapsed : 0.0}});
  } else {
    std::printf("wrote %zu train + %zu val images (%d classes, %dx%d, %.1f MB) to %s in %.1f s\n", report.train_images,
                report.val_images, o.classes, o.size, o.size, static_cast<double>(report.bytes) / 1e6,
                o.out.string().c_str(), elapsed);
  }
  return 0;
}

}  // namespace stoke::app
