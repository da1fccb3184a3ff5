#include "stoke/gpu/device_batch.hpp"

#include <stdexcept>
#include <string>
#include <utility>

#include "device_slots.hpp"

namespace stoke::gpu {

DeviceBatch::DeviceBatch() noexcept = default;

DeviceBatch::~DeviceBatch() { release(); }

DeviceBatch::DeviceBatch(DeviceBatch&& other) noexcept
    : device_(other.device_),
      shape_(std::move(other.shape_)),
      epoch_(other.epoch_),
      sequence_(other.sequence_),
      labels_(std::move(other.labels_)),
      indices_(std::move(other.indices_)),
      names_(std::move(other.names_)),
      data_(std::exchange(other.data_, nullptr)),
      device_labels_(std::exchange(other.device_labels_, nullptr)),
      mask_(std::exchange(other.mask_, nullptr)),
      targets_(std::move(other.targets_)),
      boxes_(std::exchange(other.boxes_, BoxFields{})),
      extent_h_(other.extent_h_),
      extent_w_(other.extent_w_),
      item_sizes_(std::move(other.item_sizes_)),
      device_item_sizes_(std::exchange(other.device_item_sizes_, nullptr)),
      input_(std::exchange(other.input_, TensorView{})),
      host_(std::move(other.host_)),
      slots_(std::move(other.slots_)),
      slot_(std::exchange(other.slot_, nullptr)),
      computed_(std::exchange(other.computed_, false)) {
  other.labels_.clear();
  other.indices_.clear();
  other.names_.clear();
  other.targets_.clear();
}

DeviceBatch& DeviceBatch::operator=(DeviceBatch&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    shape_ = std::move(other.shape_);
    epoch_ = other.epoch_;
    sequence_ = other.sequence_;
    labels_ = std::move(other.labels_);
    indices_ = std::move(other.indices_);
    names_ = std::move(other.names_);
    data_ = std::exchange(other.data_, nullptr);
    device_labels_ = std::exchange(other.device_labels_, nullptr);
    mask_ = std::exchange(other.mask_, nullptr);
    targets_ = std::move(other.targets_);
    boxes_ = std::exchange(other.boxes_, BoxFields{});
    extent_h_ = other.extent_h_;
    extent_w_ = other.extent_w_;
    item_sizes_ = std::move(other.item_sizes_);
    device_item_sizes_ = std::exchange(other.device_item_sizes_, nullptr);
    input_ = std::exchange(other.input_, TensorView{});
    host_ = std::move(other.host_);
    slots_ = std::move(other.slots_);
    slot_ = std::exchange(other.slot_, nullptr);
    computed_ = std::exchange(other.computed_, false);
    other.labels_.clear();
    other.indices_.clear();
    other.names_.clear();
    other.targets_.clear();
  }
  return *this;
}

DeviceBatch::DeviceBatch(nodes::Batch host) {
  take_metadata(host);
  host_ = std::move(host);
  data_ = host_.data().data();
  device_labels_ = host_.labels().data();
  mask_ = host_.mask().data();
  for (std::size_t k = 0; k < shape_.targets.size(); ++k) targets_.push_back(host_.target(k).data());
  if (host_.has_boxes()) {
    boxes_ = {host_.boxes().data(), host_.box_classes().data(), host_.box_extras().data(), host_.box_counts().data()};
  }
  if (shape_.variable_size) device_item_sizes_ = host_.item_sizes().data();
  input_ = pixels();
}

void DeviceBatch::take_metadata(nodes::Batch& batch) {
  shape_ = batch.shape();
  epoch_ = batch.epoch();
  extent_h_ = batch.extent().height;
  extent_w_ = batch.extent().width;
  item_sizes_.assign(batch.item_sizes().begin(), batch.item_sizes().end());
  labels_.assign(batch.labels().begin(), batch.labels().end());
  indices_.assign(batch.indices().begin(), batch.indices().end());
  names_.clear();
  names_.reserve(batch.size());
  for (std::string& name : batch.names()) names_.push_back(std::move(name));
}

DType to_dtype(nodes::ElementType type) noexcept {
  switch (type) {
    case nodes::ElementType::u8:
      return DType::u8;
    case nodes::ElementType::u16:
      return DType::u16;
    case nodes::ElementType::i16:
      return DType::i16;
    case nodes::ElementType::i32:
      return DType::i32;
    case nodes::ElementType::f32:
      return DType::f32;
  }
  return DType::u8;
}

TensorView DeviceBatch::pixels() const noexcept {
  const bool nhwc = shape_.layout == nodes::BatchLayout::nhwc;
  return TensorView{.data = data_,
                    .dtype = to_dtype(shape_.pixel_type),
                    .layout = nhwc ? TensorLayout::nhwc : TensorLayout::nchw,
                    .n = size(),
                    .c = shape_.channels,
                    .h = extent_h_,
                    .w = extent_w_};
}

TensorView DeviceBatch::mask() const noexcept {
  if (!shape_.mask || mask_ == nullptr) return TensorView{};
  return TensorView{.data = mask_,
                    .dtype = to_dtype(*shape_.mask),
                    .layout = TensorLayout::nhwc,
                    .n = size(),
                    .c = 1,
                    .h = extent_h_,
                    .w = extent_w_};
}

const float* DeviceBatch::device_target(std::size_t k) const {
  if (k >= targets_.size())
    throw std::out_of_range("DeviceBatch::device_target: target " + std::to_string(k) + " of a batch with " +
                            std::to_string(targets_.size()) + " targets");
  return targets_[k];
}

const float* DeviceBatch::device_target(std::string_view name) const {
  if (const auto k = shape_.target_index(name)) return device_target(*k);
  throw std::out_of_range("DeviceBatch::device_target: the batch has no target '" + std::string(name) + "' (" +
                          shape_.describe() + ")");
}

const Event* DeviceBatch::ready() const noexcept { return slot_ ? &slot_->copy_end : nullptr; }

std::size_t DeviceBatch::slot() const noexcept { return slot_ ? slot_->id : (host_.valid() ? host_.slot() : 0); }

void DeviceBatch::release() noexcept {
  if (slot_ != nullptr) {
    std::shared_ptr<detail::DeviceSlots> slots = std::move(slots_);
    slots->release(*std::exchange(slot_, nullptr), std::exchange(computed_, false));
  }
  host_.release();
  data_ = nullptr;
  device_labels_ = nullptr;
  mask_ = nullptr;
  targets_.clear();
  boxes_ = BoxFields{};
  device_item_sizes_ = nullptr;
  item_sizes_.clear();
  input_ = TensorView{};
}

}  // namespace stoke::gpu
