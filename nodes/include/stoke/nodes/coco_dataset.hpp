// CocoDataset: object detection data as COCO describes it -- one JSON file of images, categories
// and box annotations beside a folder of images -- as samples whose boxes travel with them.
//
//   stoke::nodes::CocoDataset coco("annotations/instances_val2017.json", "val2017");
//   Sample s = coco.read(0);   // the image's bytes, s.boxes in pixels (x0, y0, x1, y1), iscrowd
//
// Bad input follows the pipeline's policy: with CocoOptions::on_bad = skip (the default) a
// malformed annotation or a box outside its image is left out and listed by ignored(), naming the
// annotation and why; with fail the constructor throws naming the first. An image file that is
// missing or unreadable is found when it is read, like any file: read() throws naming it, and the
// read stage's OnError skips or fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "stoke/nodes/dataset.hpp"

namespace stoke::nodes {

struct CocoOptions {
  enum class OnBad : std::uint8_t { skip, fail };
  /// A malformed annotation or a box outside its image: left out and listed (skip), or an error.
  OnBad on_bad = OnBad::skip;
  /// Crowd annotations (iscrowd = 1) kept as boxes whose extra value is 1, or left out.
  bool keep_crowd = true;
  /// Images without a (kept) annotation kept as samples without boxes, or left out.
  bool keep_empty = true;
};

/// The images of a COCO annotation file in the file's order, each with its boxes. Boxes are
/// COCO's [x, y, width, height] as x0, y0, x1, y1 in pixels, classes the categories' positions in
/// id order (classes() gives their names), one extra value per box: iscrowd. A box may touch the
/// image's edge; one reaching beyond the image's declared size by more than half a pixel is bad
/// input. Unlabelled as a whole (label -1).
///
/// The JSON is parsed once at construction (nlohmann::json) and kept in flat arrays; the parse
/// itself briefly holds the whole document (COCO's train2017 instances, 450 MB of JSON, takes
/// several GB while it is parsed). Thread-safe to read.
class CocoDataset final : public Dataset {
 public:
  /// Throws std::runtime_error naming the file when it cannot be read or is not COCO (no images,
  /// annotations or categories array), and with OnBad::fail naming the first bad annotation or
  /// image entry.
  CocoDataset(std::filesystem::path annotations, std::filesystem::path images, CocoOptions options = {});

  std::size_t size() const noexcept override { return images_.size(); }
  int label(std::size_t) const override { return -1; }
  /// The image's path.
  std::string name(std::size_t i) const override;
  /// The image file's bytes and its boxes. Throws std::runtime_error naming the file when it
  /// cannot be read.
  Sample read(std::size_t i) const override;
  /// Category names, in id order: a box's class indexes it.
  const std::vector<std::string>& classes() const noexcept override { return classes_; }
  /// Annotations and image entries left out, and why.
  const std::vector<IgnoredFile>& ignored() const noexcept override { return ignored_; }

  /// The COCO category id of each class.
  const std::vector<std::int64_t>& category_ids() const noexcept { return category_ids_; }
  /// Boxes kept over the whole file.
  std::size_t boxes() const noexcept { return classes_of_boxes_.size(); }

 private:
  struct ImageEntry {
    std::string file;
    std::uint32_t first_box;
    std::uint32_t boxes;
  };

  std::filesystem::path annotations_;
  std::filesystem::path root_;
  std::vector<ImageEntry> images_;
  std::vector<float> corners_;  // 4 per box, images' boxes contiguous
  std::vector<std::int32_t> classes_of_boxes_;
  std::vector<float> crowd_;
  std::vector<std::string> classes_;
  std::vector<std::int64_t> category_ids_;
  std::vector<IgnoredFile> ignored_;
};

}  // namespace stoke::nodes
