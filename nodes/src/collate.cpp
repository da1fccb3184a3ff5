#include "stoke/nodes/collate.hpp"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace stoke::nodes {

namespace {

std::string_view to_string(PixelLayout layout) { return layout == PixelLayout::hwc ? "hwc_u8" : "chw_f32"; }

// Copies `rows` rows of `row_bytes` each from a matrix that may be a ROI (rows not contiguous).
void copy_rows(const cv::Mat& from, std::byte* to, std::size_t row_bytes) {
  if (from.isContinuous()) {
    std::memcpy(to, from.data, row_bytes * static_cast<std::size_t>(from.rows));
    return;
  }
  for (int r = 0; r < from.rows; ++r) std::memcpy(to + static_cast<std::size_t>(r) * row_bytes, from.ptr(r), row_bytes);
}

}  // namespace

void check_fits(const Image& image, const BatchShape& shape) {
  // Batches hold pixels and labels only, so far: a mask or targets would be dropped without a word.
  if (!image.mask.empty() || !image.targets.empty()) {
    throw std::invalid_argument("collate: " + item_name(image) + " carries " +
                                (image.mask.empty() ? std::string("targets") : std::string("a mask")) +
                                ", but batches hold pixels and labels only (masks and targets in batches are not "
                                "built yet); leave them out of the samples, or batch them yourself");
  }
  const PixelLayout wanted = pixel_layout(shape.layout);
  if (image.layout != wanted) {
    throw std::invalid_argument("collate: " + item_name(image) + " has layout " + std::string(to_string(image.layout)) +
                                " but the batch holds " + std::string(nodes::to_string(shape.layout)) +
                                (shape.layout == BatchLayout::nhwc_u8
                                     ? ": remove the normalize transform or use an nchw_f32 batch"
                                     : ": end the transforms with normalize or use an nhwc_u8 batch"));
  }
  const int type = image.layout == PixelLayout::hwc ? CV_8UC3 : CV_32FC1;
  if (image.pixels.type() != type || (image.layout == PixelLayout::chw_f32 && image.pixels.rows % 3 != 0)) {
    throw std::invalid_argument("collate: " + item_name(image) + " has pixels of OpenCV type " +
                                std::to_string(image.pixels.type()) + " (" + std::to_string(image.pixels.cols) + "x" +
                                std::to_string(image.pixels.rows) + ") that do not match its layout " +
                                std::string(to_string(image.layout)) +
                                (image.layout == PixelLayout::hwc ? " (CV_8UC3)" : " (CV_32FC1, 3 planes)"));
  }
  if (image.width() != shape.width || image.height() != shape.height) {
    throw std::invalid_argument("collate: " + item_name(image) + " is " + std::to_string(image.width()) + "x" +
                                std::to_string(image.height()) + " but the batch holds " + std::to_string(shape.width) +
                                "x" + std::to_string(shape.height) + ": add a resize/crop transform");
  }
}

void copy_into(Batch& batch, std::size_t i, const Image& image, bool keep_name) {
  const BatchShape& shape = batch.shape();
  std::byte* to = batch.item(i).data();
  // hwc_u8: H rows of W*3 bytes; chw_f32: 3H rows (three planes) of W floats.
  const std::size_t row_bytes = image.layout == PixelLayout::hwc
                                    ? static_cast<std::size_t>(shape.width) * 3
                                    : static_cast<std::size_t>(shape.width) * sizeof(float);
  copy_rows(image.pixels, to, row_bytes);
  batch.labels()[i] = image.label;
  batch.indices()[i] = image.index;
  if (keep_name)
    batch.names()[i] = image.name;
  else
    batch.names()[i].clear();
}

Collate::Collate(BatchPool pool, CollateOptions options) : pool_(std::move(pool)), options_(options) {
  if (pool_.shape().channels != 3)
    throw std::invalid_argument("collate: the batch pool has " + std::to_string(pool_.shape().channels) +
                                " channels, but images are RGB: use a pool with channels = 3");
  pending_.reserve(pool_.shape().batch_size);
}

void Collate::operator()(Image image, graph::Emitter<Batch>& out) {
  check_fits(image, pool_.shape());
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
  for (std::size_t i = 0; i < pending_.size(); ++i) copy_into(batch, i, pending_[i], options_.keep_names);
  pending_.clear();
  out.emit(std::move(batch));
}

}  // namespace stoke::nodes
