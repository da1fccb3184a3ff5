// Helpers shared by the device-stage tests: host batches with known contents, and the pipeline
// source -> to-device -> compute -> sink around a callable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

#include "stoke/gpu/compute.hpp"
#include "stoke/gpu/to_device.hpp"
#include "stoke/graph/graph.hpp"
#include "stoke/nodes/batch_pool.hpp"

namespace stoke::gpu::test {

/// The byte at position `i` of batch `b`'s pixels: any batch's contents are known without keeping it.
inline std::uint8_t pattern(std::uint64_t b, std::size_t i) {
  return static_cast<std::uint8_t>((b * 131 + i * 7 + (i >> 9)) & 0xff);
}
/// The byte at position `i` of batch `b`'s masks.
inline std::uint8_t mask_pattern(std::uint64_t b, std::size_t i) { return pattern(b + 101, i * 3); }
/// Value `i` of target `k` of batch `b`.
inline float target_pattern(std::uint64_t b, std::size_t k, std::size_t i) {
  return static_cast<float>(b) * 1000.0f + static_cast<float>(k) * 100.0f + static_cast<float>(i) * 0.5f;
}

/// A source of `count` full batches from `pool`, batch b's pixel bytes filled with pattern(b, .),
/// its mask bytes (if any) with mask_pattern(b, .) and its targets with target_pattern(b, k, .)
/// (unless `fill` is false: then the fields are whatever the slot held, and the source costs next
/// to nothing),
/// labels b*1000 + item, indices b*batch_size + item. Waits in acquire() while the pool is empty
/// (the pipeline needs more than one thread).
class PatternSource {
 public:
  PatternSource(nodes::BatchPool pool, std::uint64_t count, bool fill = true)
      : pool_(std::move(pool)), count_(count), fill_(fill) {}
  std::optional<nodes::Batch> operator()() {
    if (next_ == count_) return std::nullopt;
    nodes::Batch batch = pool_.acquire();
    const std::uint64_t b = next_++;
    batch.set_size(batch.capacity());
    if (fill_) {
      auto data = batch.data();
      for (std::size_t i = 0; i < data.size(); ++i) data[i] = std::byte{pattern(b, i)};
      auto mask = batch.mask();
      for (std::size_t i = 0; i < mask.size(); ++i) mask[i] = std::byte{mask_pattern(b, i)};
      for (std::size_t k = 0; k < batch.shape().targets.size(); ++k) {
        auto values = batch.target(k);
        for (std::size_t i = 0; i < values.size(); ++i) values[i] = target_pattern(b, k, i);
      }
      // Boxes: corners and extras like target 100, classes and counts from the pattern.
      for (std::size_t i = 0; i < batch.boxes().size(); ++i) batch.boxes()[i] = target_pattern(b, 100, i);
      for (std::size_t i = 0; i < batch.box_extras().size(); ++i) batch.box_extras()[i] = target_pattern(b, 101, i);
      for (std::size_t i = 0; i < batch.box_classes().size(); ++i) batch.box_classes()[i] = pattern(b, i);
      for (std::size_t i = 0; i < batch.box_counts().size(); ++i) batch.box_counts()[i] = mask_pattern(b, i);
    }
    for (std::size_t item = 0; item < batch.size(); ++item) {
      batch.labels()[item] = static_cast<std::int32_t>(b * 1000 + item);
      batch.indices()[item] = b * batch.capacity() + item;
    }
    return batch;
  }

 private:
  nodes::BatchPool pool_;
  std::uint64_t count_;
  bool fill_;
  std::uint64_t next_ = 0;
};

/// source -> "to-device" -> "compute" -> "collect" with the given compute body and sink.
template <class F, class Sink>
graph::RunReport run_device_pipeline(PatternSource source, ToDevice to_device, Compute<F> compute, Sink sink,
                                     graph::PipelineOptions options = {.threads = 4}) {
  using Output = typename Compute<F>::Output;
  graph::Pipeline pipe(options);
  const graph::StageOptions compute_options = compute.stage_options();
  pipe.source("source", std::move(source))
      .template async<DeviceBatch>("to-device", std::move(to_device), ToDevice::stage_options())
      .template async<Output>("compute", std::move(compute), compute_options)
      .sink("collect", std::move(sink), {.ordered = true});
  return pipe.run();
}

}  // namespace stoke::gpu::test
