#include "stoke/nodes/collate.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "stoke/nodes/normalize.hpp"

namespace stoke::nodes {

namespace {

std::string_view to_string(PixelLayout layout) { return layout == PixelLayout::hwc ? "hwc" : "chw_f32"; }

// Copies the rows of a matrix that may be a ROI (rows not contiguous), `row_bytes` each.
void copy_rows(const cv::Mat& from, std::byte* to, std::size_t row_bytes) {
  if (from.isContinuous()) {
    std::memcpy(to, from.data, row_bytes * static_cast<std::size_t>(from.rows));
    return;
  }
  for (int r = 0; r < from.rows; ++r) std::memcpy(to + static_cast<std::size_t>(r) * row_bytes, from.ptr(r), row_bytes);
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  if (shape.empty()) return "a scalar";
  std::string text = "[";
  for (std::size_t d = 0; d < shape.size(); ++d) text += (d ? "x" : "") + std::to_string(shape[d]);
  return text + "]";
}

// The rows of `from` (`row_bytes` each) at the top-left of a frame whose rows are `frame_row_bytes`.
void copy_into_frame(const cv::Mat& from, std::byte* to, std::size_t frame_row_bytes, std::size_t row_bytes) {
  if (frame_row_bytes == row_bytes) {
    copy_rows(from, to, row_bytes);
    return;
  }
  for (int r = 0; r < from.rows; ++r)
    std::memcpy(to + static_cast<std::size_t>(r) * frame_row_bytes, from.ptr(r), row_bytes);
}

// Item i's boxes, then padding: zero corners and extras, class -1.
void copy_boxes(Batch& batch, std::size_t i, const Boxes& boxes) {
  const BatchShape& shape = batch.shape();
  const std::size_t room = shape.max_boxes;
  const auto extras = static_cast<std::size_t>(shape.box_extras);
  const std::span<float> corners = batch.boxes().subspan(i * room * 4, room * 4);
  const std::span<std::int32_t> classes = batch.box_classes().subspan(i * room, room);
  const std::span<float> extra = batch.box_extras().subspan(i * room * extras, room * extras);
  std::fill(corners.begin(), corners.end(), 0.0f);
  std::fill(classes.begin(), classes.end(), -1);
  std::fill(extra.begin(), extra.end(), 0.0f);
  for (std::size_t b = 0; b < boxes.size(); ++b) {
    std::copy(boxes.xyxy[b].begin(), boxes.xyxy[b].end(), corners.begin() + static_cast<std::ptrdiff_t>(4 * b));
    classes[b] = boxes.classes[b];
  }
  std::copy(boxes.extra.begin(), boxes.extra.end(), extra.begin());
  batch.box_counts()[i] = static_cast<std::int32_t>(boxes.size());
}

}  // namespace

BatchShape shape_of(const Image& image, std::size_t batch_size) {
  check_fields(image, "shape_of");
  BatchShape shape{.batch_size = batch_size,
                   .height = image.height(),
                   .width = image.width(),
                   .channels = image.channels(),
                   .layout = image.layout == PixelLayout::hwc ? BatchLayout::nhwc : BatchLayout::nchw,
                   .pixel_type = element_type_of_depth(image.depth()).value_or(ElementType::u8)};
  if (!image.mask.empty()) shape.mask = element_type_of_depth(image.mask.depth());
  // A sample of a detection set without a box (extras declared, no box yet) still gets room for them.
  if (!image.boxes.empty() || image.boxes.extras > 0) {
    shape.max_boxes = std::max(default_max_boxes, image.boxes.size());
    shape.box_extras = image.boxes.extras;
  }
  for (const auto& [name, target] : image.targets) shape.targets.push_back({name, target.shape});
  shape.validate();
  return shape;
}

void check_fits(const Image& image, const BatchShape& shape) {
  // The item's name is put together only for a message: check_fits runs on every item.
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument("collate: " + item_name(image) + " " + why);
  };
  const PixelLayout wanted = pixel_layout(shape.layout);
  if (image.layout != wanted) {
    fail("has layout " + std::string(to_string(image.layout)) + " but the batch holds " +
         std::string(nodes::to_string(shape.layout)) +
         (shape.layout == BatchLayout::nhwc ? ": remove the normalize transform or use an nchw batch"
                                            : ": end the transforms with normalize or use an nhwc batch"));
  }
  check_fields(image, "collate");
  const std::optional<ElementType> type = element_type_of_depth(image.depth());
  if (type != shape.pixel_type) {
    fail("has " + describe_pixels(image.pixels) + " pixels but the batch holds " +
         std::string(nodes::to_string(shape.pixel_type)) + ": build the pool with the image's pixel type (shape_of())" +
         " or convert the pixels in a transform");
  }
  if (image.channels() != shape.channels) {
    fail("has " + std::to_string(image.channels()) + " channels but the batch holds " + std::to_string(shape.channels) +
         ": decode with the batch's colour mode, or build the pool for the image's channels");
  }
  if (shape.variable_size && (image.width() > shape.width || image.height() > shape.height)) {
    fail("is " + std::to_string(image.width()) + "x" + std::to_string(image.height()) +
         " but the batch holds at most " + std::to_string(shape.width) + "x" + std::to_string(shape.height) +
         ": resize it (resize size=N max_size=M) or "
         "raise the shape's height and width");
  }
  if (!shape.variable_size && (image.width() != shape.width || image.height() != shape.height)) {
    fail("is " + std::to_string(image.width()) + "x" + std::to_string(image.height()) + " but the batch holds " +
         std::to_string(shape.width) + "x" + std::to_string(shape.height) + ": add a resize/crop transform");
  }
  if (image.mask.empty() != !shape.mask) {
    fail(image.mask.empty() ? "has no mask but the batch holds one per item: give every sample a mask"
                            : "carries a mask but the batch holds none: build the pool with a mask type "
                              "(BatchShape::mask, or shape_of())");
  }
  if (shape.mask && element_type_of_depth(image.mask.depth()) != shape.mask) {
    fail("has a " + describe_pixels(image.mask) + " mask but the batch holds " +
         std::string(nodes::to_string(*shape.mask)) + " masks");
  }
  for (const auto& [name, target] : image.targets) {
    const auto k = shape.target_index(name);
    if (!k) fail("carries target '" + name + "' but the batch has no place for it: add it to BatchShape::targets");
    if (target.shape != shape.targets[*k].shape) {
      fail("has target '" + name + "' of shape " + shape_text(target.shape) + " but the batch holds " +
           shape_text(shape.targets[*k].shape));
    }
  }
  if (image.boxes.size() > shape.max_boxes) {
    fail(shape.max_boxes == 0
             ? "carries " + std::to_string(image.boxes.size()) +
                   " boxes but the batch holds none: build the pool with BatchShape::max_boxes"
             : "carries " + std::to_string(image.boxes.size()) + " boxes but the batch has room for " +
                   std::to_string(shape.max_boxes) + ": raise max_boxes, or drop boxes first (filter_boxes)");
  }
  if (!image.boxes.empty() && image.boxes.extras != shape.box_extras) {
    fail("has boxes of " + std::to_string(image.boxes.extras) + " extra values but the batch holds " +
         std::to_string(shape.box_extras));
  }
  if (image.targets.size() != shape.targets.size()) {
    for (const TargetShape& target : shape.targets)
      if (image.targets.count(target.name) == 0) fail("lacks target '" + target.name + "' that the batch holds");
  }
}

void copy_into(Batch& batch, std::size_t i, const Image& image, bool keep_name, const Normalize* normalize) {
  const BatchShape& shape = batch.shape();
  const cv::Size frame = batch.extent();
  const cv::Size size(image.width(), image.height());
  // hwc: H rows of W x channels elements; chw_f32: channels planes of H rows of W floats, each
  // plane in a frame of its own. An item smaller than the frame sits at its top-left, zeros beyond.
  const bool hwc = image.layout == PixelLayout::hwc;
  const std::size_t per_pixel = (hwc ? static_cast<std::size_t>(shape.channels) : 1) * shape.element_size();
  const std::span<std::byte> item = batch.item(i);
  if (normalize != nullptr) {
    normalize->write_planes(image, reinterpret_cast<float*>(item.data()));
  } else if (size == frame) {
    copy_rows(image.pixels, item.data(), static_cast<std::size_t>(frame.width) * per_pixel);
  } else {
    std::fill(item.begin(), item.end(), std::byte{0});
    const int planes = hwc ? 1 : image.planes;
    for (int p = 0; p < planes; ++p)
      copy_into_frame(image.pixels.rowRange(p * size.height, (p + 1) * size.height),
                      item.data() + static_cast<std::size_t>(p) * static_cast<std::size_t>(frame.area()) * per_pixel,
                      static_cast<std::size_t>(frame.width) * per_pixel,
                      static_cast<std::size_t>(size.width) * per_pixel);
  }
  if (shape.mask) {
    const std::size_t mask_pixel = element_size(*shape.mask);
    const std::span<std::byte> mask = batch.mask_item(i);
    if (size != frame) std::fill(mask.begin(), mask.end(), std::byte{0});
    copy_into_frame(image.mask, mask.data(), static_cast<std::size_t>(frame.width) * mask_pixel,
                    static_cast<std::size_t>(size.width) * mask_pixel);
  }
  if (shape.variable_size) {
    batch.item_sizes()[2 * i] = size.height;
    batch.item_sizes()[2 * i + 1] = size.width;
  }
  for (std::size_t k = 0; k < shape.targets.size(); ++k) {
    const std::vector<float>& values = image.targets.at(shape.targets[k].name).values;
    std::copy(values.begin(), values.end(), batch.target(k).subspan(i * values.size(), values.size()).begin());
  }
  if (shape.max_boxes > 0) copy_boxes(batch, i, image.boxes);
  batch.labels()[i] = image.label;
  batch.indices()[i] = image.index;
  if (keep_name)
    batch.names()[i] = image.name;
  else
    batch.names()[i].clear();
}

Collate::Collate(BatchPool pool, CollateOptions options)
    : pool_(std::move(pool)), options_(std::move(options)), arriving_(pool_.shape()) {
  pending_.reserve(pool_.shape().batch_size);
  if (!options_.normalize) return;
  if (arriving_.layout != BatchLayout::nchw || arriving_.pixel_type != ElementType::f32 || arriving_.variable_size) {
    const std::string pools = std::string(to_string(arriving_.pixel_type)) + " " +
                              std::string(to_string(arriving_.layout)) +
                              (arriving_.variable_size ? " of variable size" : "");
    throw std::invalid_argument("collate: normalizing into the batch needs fixed-size f32 NCHW batches, not " + pools);
  }
  const PixelNormalization& n = *options_.normalize;
  normalize_ = std::make_shared<const Normalize>(n.mean, n.stddev, n.range);
  arriving_.layout = BatchLayout::nhwc;
  arriving_.pixel_type = ElementType::u8;
}

void Collate::operator()(Image image, graph::Emitter<Batch>& out) {
  check_fits(image, arriving_);
  if (normalize_) {
    if (std::string why = normalize_->refuses(image); !why.empty()) throw std::invalid_argument("normalize: " + why);
  }
  if (!pending_.empty() && pending_.front().epoch != image.epoch) complete(out);
  pending_.push_back(std::move(image));
  if (pending_.size() == pool_.shape().batch_size) complete(out);
}

void Collate::flush(graph::Emitter<Batch>& out) { complete(out); }

bool Collate::ready(const graph::Wake& wake) {
  // The next item takes a slot when it completes a batch, or when it starts a new epoch and so
  // completes the pending partial one (which drop_last drops instead).
  const bool may_take = pending_.size() + 1 >= pool_.shape().batch_size || (!pending_.empty() && !options_.drop_last);
  return !may_take || pool_.ready(wake);
}

bool Collate::ready_to_flush(const graph::Wake& wake) {
  return pending_.empty() || options_.drop_last || pool_.ready(wake);
}

void Collate::complete(graph::Emitter<Batch>& out) {
  if (pending_.empty()) return;
  if (pending_.size() < pool_.shape().batch_size && options_.drop_last) {
    pending_.clear();
    return;
  }
  Batch batch = pool_.acquire();
  batch.set_size(pending_.size());
  batch.set_epoch(pending_.front().epoch);
  if (pool_.shape().variable_size) {
    cv::Size largest(1, 1);
    for (const Image& image : pending_) {
      largest.width = std::max(largest.width, image.width());
      largest.height = std::max(largest.height, image.height());
    }
    batch.set_extent(largest);
  }
  // Each item writes its own part of the slot: the copies (or normalizations) spread over the
  // pipeline's free threads, isolated so that this stage's thread runs no other stage's task meanwhile.
  constexpr std::size_t items_per_task = 4;
  tbb::this_task_arena::isolate([&] {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, pending_.size(), items_per_task),
                      [&](const tbb::blocked_range<std::size_t>& items) {
                        for (std::size_t i = items.begin(); i < items.end(); ++i) {
                          copy_into(batch, i, pending_[i], options_.keep_names, normalize_.get());
                        }
                      });
  });
  pending_.clear();
  out.emit(std::move(batch));
}

}  // namespace stoke::nodes
