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

/// A source of `count` full batches from `pool`, batch b filled with pattern(b, .) (unless `fill`
/// is false: then the pixels are whatever the slot held, and the source costs next to nothing),
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
      auto data = batch.u8();
      for (std::size_t i = 0; i < data.size(); ++i) data[i] = pattern(b, i);
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
