// ReadOnThreads: the read stage for a dataset whose reads wait rather than compute -- remote tar
// shards, where a read is a range request or waits for a shard's download. An async stage body
// (stoke::graph::Completion) that runs each read on one of its own threads, so the pipeline's
// cores keep decoding while reads wait on the network, and many reads are in flight at once.
//
//   pipe.source("source", DatasetSource(dataset->size(), order))
//       .async<Sample>("read", ReadOnThreads(dataset, 16), {.concurrency = graph::parallel(16)})
//       .map("decode", ...);
//
// The stage's concurrency bounds the reads queued and running (give it the thread count: more
// only queue). Copies share the threads; the last copy to go joins them. The threads mostly wait:
// they are not counted against the pipeline's cores.
#pragma once

#include <memory>

#include "stoke/graph/completion.hpp"
#include "stoke/nodes/dataset.hpp"
#include "stoke/nodes/sample.hpp"

namespace stoke::nodes {

class ReadOnThreads {
 public:
  /// Starts `threads` reader threads (at least 1).
  ReadOnThreads(DatasetPtr dataset, int threads);

  /// Queues the read of `ref`; a reader thread resolves `done` with the sample (as ReadSample
  /// makes it) or with the read's exception.
  void operator()(ItemRef ref, graph::Completion<Sample> done) const;

 private:
  struct Pool;
  std::shared_ptr<Pool> pool_;
};

}  // namespace stoke::nodes
