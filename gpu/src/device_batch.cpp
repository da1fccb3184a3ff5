#include "stoke/gpu/device_batch.hpp"

#include <utility>

#include "device_slots.hpp"

namespace stoke::gpu {

DeviceBatch::DeviceBatch() noexcept = default;

DeviceBatch::~DeviceBatch() { release(); }

DeviceBatch::DeviceBatch(DeviceBatch&& other) noexcept
    : device_(other.device_),
      shape_(other.shape_),
      epoch_(other.epoch_),
      sequence_(other.sequence_),
      labels_(std::move(other.labels_)),
      indices_(std::move(other.indices_)),
      names_(std::move(other.names_)),
      data_(std::exchange(other.data_, nullptr)),
      device_labels_(std::exchange(other.device_labels_, nullptr)),
      input_(std::exchange(other.input_, TensorView{})),
      host_(std::move(other.host_)),
      slots_(std::move(other.slots_)),
      slot_(std::exchange(other.slot_, nullptr)),
      computed_(std::exchange(other.computed_, false)) {
  other.labels_.clear();
  other.indices_.clear();
  other.names_.clear();
}

DeviceBatch& DeviceBatch::operator=(DeviceBatch&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    shape_ = other.shape_;
    epoch_ = other.epoch_;
    sequence_ = other.sequence_;
    labels_ = std::move(other.labels_);
    indices_ = std::move(other.indices_);
    names_ = std::move(other.names_);
    data_ = std::exchange(other.data_, nullptr);
    device_labels_ = std::exchange(other.device_labels_, nullptr);
    input_ = std::exchange(other.input_, TensorView{});
    host_ = std::move(other.host_);
    slots_ = std::move(other.slots_);
    slot_ = std::exchange(other.slot_, nullptr);
    computed_ = std::exchange(other.computed_, false);
    other.labels_.clear();
    other.indices_.clear();
    other.names_.clear();
  }
  return *this;
}

DeviceBatch::DeviceBatch(nodes::Batch host) {
  take_metadata(host);
  host_ = std::move(host);
  data_ = host_.data().data();
  device_labels_ = host_.labels().data();
  input_ = pixels();
}

void DeviceBatch::take_metadata(nodes::Batch& batch) {
  shape_ = batch.shape();
  epoch_ = batch.epoch();
  labels_.assign(batch.labels().begin(), batch.labels().end());
  indices_.assign(batch.indices().begin(), batch.indices().end());
  names_.clear();
  names_.reserve(batch.size());
  for (std::string& name : batch.names()) names_.push_back(std::move(name));
}

TensorView DeviceBatch::pixels() const noexcept {
  const bool u8 = shape_.layout == nodes::BatchLayout::nhwc_u8;
  return TensorView{.data = data_,
                    .dtype = u8 ? DType::u8 : DType::f32,
                    .layout = u8 ? TensorLayout::nhwc : TensorLayout::nchw,
                    .n = size(),
                    .c = shape_.channels,
                    .h = shape_.height,
                    .w = shape_.width};
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
  input_ = TensorView{};
}

}  // namespace stoke::gpu
