#include "stoke/nodes/batch.hpp"

#include <stdexcept>
#include <utility>

namespace stoke::nodes {

std::string_view to_string(BatchLayout layout) noexcept {
  switch (layout) {
    case BatchLayout::nhwc_u8:
      return "nhwc_u8";
    case BatchLayout::nchw_f32:
      return "nchw_f32";
  }
  return "unknown";
}

void BatchShape::validate() const {
  const auto bad = [this](const char* field) {
    return std::invalid_argument(std::string("batch shape ") + describe() + ": " + field + " must be positive");
  };
  if (batch_size == 0) throw bad("batch_size");
  if (height <= 0) throw bad("height");
  if (width <= 0) throw bad("width");
  if (channels <= 0) throw bad("channels");
  if (layout != BatchLayout::nhwc_u8 && layout != BatchLayout::nchw_f32)
    throw std::invalid_argument("batch shape: unknown layout " + std::to_string(static_cast<int>(layout)));
}

std::string BatchShape::describe() const {
  return std::to_string(batch_size) + " x " + std::to_string(height) + "x" + std::to_string(width) + "x" +
         std::to_string(channels) + " " + std::string(to_string(layout));
}

Batch::Batch(Batch&& other) noexcept
    : pool_(std::move(other.pool_)),
      slot_(std::exchange(other.slot_, &detail::empty_slot)),
      shape_(std::exchange(other.shape_, &detail::empty_shape)) {}

Batch& Batch::operator=(Batch&& other) noexcept {
  if (this != &other) {
    release();
    pool_ = std::move(other.pool_);
    slot_ = std::exchange(other.slot_, &detail::empty_slot);
    shape_ = std::exchange(other.shape_, &detail::empty_shape);
  }
  return *this;
}

Batch::~Batch() { release(); }

void Batch::release() noexcept {
  if (valid()) detail::release_slot(*pool_, *std::exchange(slot_, &detail::empty_slot));
  shape_ = &detail::empty_shape;
  pool_.reset();  // may free the pool's memory, when the pool itself is gone
}

void Batch::set_size(std::size_t n) {
  if (n > capacity())
    throw std::out_of_range("Batch::set_size: " + std::to_string(n) + " items do not fit a batch of " +
                            std::to_string(capacity()));
  if (valid()) slot_->size = n;
}

namespace {
void require_layout(const Batch& batch, BatchLayout wanted) {
  const BatchShape* shape = &batch.shape();
  if (batch.valid() && shape->layout != wanted)
    throw std::logic_error("Batch: asked for " + std::string(to_string(wanted)) + " data but the batch holds " +
                           std::string(to_string(shape->layout)) + " (use " +
                           (shape->layout == BatchLayout::nhwc_u8 ? "u8()" : "f32()") + ")");
}
}  // namespace

std::span<std::uint8_t> Batch::u8() {
  require_layout(*this, BatchLayout::nhwc_u8);
  auto bytes = data();
  return {reinterpret_cast<std::uint8_t*>(bytes.data()), bytes.size()};
}

std::span<const std::uint8_t> Batch::u8() const {
  require_layout(*this, BatchLayout::nhwc_u8);
  auto bytes = data();
  return {reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()};
}

// The slot's data is aligned to BatchPool::slot_alignment, so the float view is aligned.
std::span<float> Batch::f32() {
  require_layout(*this, BatchLayout::nchw_f32);
  auto bytes = data();
  return {reinterpret_cast<float*>(bytes.data()), bytes.size() / sizeof(float)};
}

std::span<const float> Batch::f32() const {
  require_layout(*this, BatchLayout::nchw_f32);
  auto bytes = data();
  return {reinterpret_cast<const float*>(bytes.data()), bytes.size() / sizeof(float)};
}

}  // namespace stoke::nodes
