// Collate: the batch stage. Gathers Images into Batches taken from a BatchPool.
//
//   stoke::nodes::BatchPool pool({.batch_size = 64, .height = 224, .width = 224}, 4);
//   pipe.source(...)
//       .map("decode", ..., {.concurrency = parallel(4), .ordered = true})
//       .emit<stoke::nodes::Batch>("batch", stoke::nodes::Collate(pool), stoke::nodes::Collate::stage_options())
//       .sink("train", [](stoke::nodes::Batch batch) { ... });
//
// Run it as a serial, ordered stage (Collate::stage_options()): it is stateful (the batch being
// gathered), and a serial ordered stage takes its inputs in source order, so a seeded run gives
// the same batches, item for item, whatever the thread count. A parallel or unordered batch stage
// would mix items between batches from run to run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "stoke/graph/emitter.hpp"
#include "stoke/graph/options.hpp"
#include "stoke/graph/wake.hpp"
#include "stoke/nodes/batch.hpp"
#include "stoke/nodes/batch_pool.hpp"
#include "stoke/nodes/image.hpp"
#include "stoke/nodes/transform.hpp"

namespace stoke::nodes {

/// Room for boxes that shape_of() gives a batch of items with boxes.
inline constexpr std::size_t default_max_boxes = 128;

/// The shape of a batch of `batch_size` items like `image`: its size, channels, layout, pixel
/// type, mask type, targets, and room for default_max_boxes boxes (or as many as it has, if more)
/// when it has boxes (or declares their extras: a detection sample without a box). The way to build a pool for samples
/// beyond 8-bit RGB:
///
///   BatchPool pool(shape_of(first_sample, 16), 4);
///
/// Throws std::invalid_argument when the image's fields do not fit together (check_fields).
BatchShape shape_of(const Image& image, std::size_t batch_size);

/// Throws std::invalid_argument when `image` cannot go into a batch of `shape`: another size
/// ("collate: photo.jpg is 500x375 but the batch holds 224x224: add a resize/crop transform"),
/// layout, pixel type or channel count, a mask the batch has no place for (or none where it
/// holds one), a target it has no place for, one it lacks, or one of another shape, more boxes
/// than it has room for or boxes of another number of extras. The message
/// names the item (Image::name, else its index).
void check_fits(const Image& image, const BatchShape& shape);

class Normalize;

/// Copies `image` into item `i` of `batch` (i < batch.size()): its pixels (row by row, or plane
/// by plane for chw_f32, so ROIs work), mask, targets, boxes (padded), label, index and, with
/// `keep_name`, name. With `normalize`, the pixels (HWC, the batch's size) are written through it
/// into the item's float planes instead of copied (Normalize::write_planes).
/// Precondition: check_fits(image, batch.shape()), or with `normalize` check_fits against the
/// batch's shape in HWC of the image's pixel type.
void copy_into(Batch& batch, std::size_t i, const Image& image, bool keep_name = true,
               const Normalize* normalize = nullptr);

struct CollateOptions {
  /// Drop a partial batch (the end of an epoch) instead of emitting it.
  bool drop_last = false;
  /// Copy each item's name into Batch::names() (apps that report per-item results need them).
  bool keep_names = true;
  /// The items' final normalization, applied as they are copied into the batch: one pass from
  /// decoded pixels to the batch's floats instead of a float image written by the decode threads
  /// and copied again. The items then arrive as 8-bit HWC images (a normalize transform's input)
  /// and the pool holds fixed-size f32 NCHW batches.
  std::optional<PixelNormalization> normalize{};
};

/// An emit-stage body for stoke::graph: Image in, Batch out (see the example above).
///
/// - Each Image is checked on arrival (check_fits); a misfit is an error naming the item, which
///   the stage's OnError policy turns into a failed run or a skipped item.
/// - A batch is emitted as soon as batch_size items have arrived: Collate then takes a slot from
///   the pool and copies the items into it. Items wait as Images, not in a slot, so a pool slot
///   is held only by batches that are complete, and a cancelled run leaves every slot in the pool.
/// - The stage never waits for a slot on a thread: Collate is a gated body (graph::Gated), and
///   while the pool has no free slot for the item that would need one, the stage parks and the
///   slot's return wakes it. That is the pipeline's backpressure, and it cannot deadlock however
///   few slots or threads there are, or whatever the stages downstream hold.
/// - Batches do not span epochs: an item of a new epoch completes the previous epoch's partial
///   batch first (emitted, or dropped with drop_last), as a per-epoch DataLoader would.
/// - flush() (called by the stage after the last input) emits the final partial batch.
/// - A complete batch's items are copied by as many of the pipeline's threads as are free (each
///   writes its own part of the slot), so the one serial stage does not cap what the decode
///   threads make.
///
/// Not thread-safe: one call at a time, which a serial stage guarantees. It must be the pool's
/// only taker within the pipeline: another stage taking slots of the same pool could leave it
/// waiting in acquire() (on a thread) after ready() said yes.
class Collate {
 public:
  /// Throws std::invalid_argument when options.normalize is given and the pool's batches are not
  /// fixed-size f32 NCHW.
  explicit Collate(BatchPool pool, CollateOptions options = {});

  /// Adds one item; emits a batch when it completes one.
  void operator()(Image image, graph::Emitter<Batch>& out);
  /// Emits the partial batch, if any (nothing with drop_last).
  void flush(graph::Emitter<Batch>& out);
  /// The gate (graph::Gated): true unless the next item may need a slot and none is free, in
  /// which case the pool rings `wake` when one comes back.
  bool ready(const graph::Wake& wake);
  /// Likewise for flush(): true unless a partial batch is to be emitted and no slot is free.
  bool ready_to_flush(const graph::Wake& wake);

  /// The options the stage must run with: serial and ordered.
  static constexpr graph::StageOptions stage_options() noexcept {
    return graph::StageOptions{.concurrency = graph::serial(), .ordered = true};
  }

  const BatchPool& pool() const noexcept { return pool_; }
  const CollateOptions& options() const noexcept { return options_; }
  /// Items waiting for their batch to complete.
  std::size_t pending() const noexcept { return pending_.size(); }

 private:
  /// Emits (or with a partial batch and drop_last, drops) the pending items.
  void complete(graph::Emitter<Batch>& out);

  BatchPool pool_;
  CollateOptions options_;
  std::shared_ptr<const Normalize> normalize_;  // options.normalize's transform, or null
  BatchShape arriving_;                         // the shape the items are checked against
  std::vector<Image> pending_;
};

}  // namespace stoke::nodes
