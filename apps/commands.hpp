// The subcommands of the `stoke` executable, one source file each.
//
// Every command has the signature `int command(int argc, char** argv)`: argv[0] is the command's
// own name (e.g. "graph" for `stoke bench graph`) and argv[1..argc) are its arguments. It returns
// the exit code (0 success, 1 failure, 2 usage error) and may throw; the dispatcher reports an
// exception as "stoke <command>: <what>" with exit code 1.
#pragma once

namespace stoke::app {

/// `stoke bench <what>`: dispatches to the benchmarks below (apps/bench.cpp).
int bench(int argc, char** argv);

/// `stoke bench graph`: the graph executor's throughput and overhead (apps/bench_graph.cpp).
int bench_graph(int argc, char** argv);

/// `stoke bench pipeline`: the CPU input pipeline on a dataset (apps/bench_pipeline.cpp).
int bench_pipeline(int argc, char** argv);

/// `stoke bench device`: copies and synthetic compute, pipelined vs serial (apps/bench_device.cpp).
int bench_device(int argc, char** argv);

/// `stoke bench autotune`: the scheduler vs a sweep of static settings (apps/bench_autotune.cpp).
int bench_autotune(int argc, char** argv);

/// `stoke bench nn`: training throughput of a built-in model, synthetic data (apps/bench_nn.cpp).
int bench_nn(int argc, char** argv);

/// `stoke bench train`: the whole pipeline's training images/s against the compute bound
/// (apps/bench_train.cpp).
int bench_train(int argc, char** argv);

/// `stoke train`: a built-in model on an image dataset, through the whole graph (apps/train.cpp).
int train(int argc, char** argv);

/// `stoke classify`: the top classes of images by a checkpoint of `stoke train` (apps/classify.cpp).
int classify(int argc, char** argv);

/// `stoke evaluate`: a checkpoint's accuracy and confusion matrix on a dataset (apps/evaluate.cpp).
int evaluate(int argc, char** argv);

/// `stoke gen-shapes`: writes the synthetic shapes dataset as JPEG ImageFolders (apps/gen_shapes.cpp).
int gen_shapes(int argc, char** argv);

/// `stoke pack`: an image folder or file list -> a packed shard, X.stoke + X.stoke.idx (apps/pack.cpp).
int pack(int argc, char** argv);

}  // namespace stoke::app
