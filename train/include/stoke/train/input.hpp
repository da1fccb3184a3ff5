// The input half of training and inference: open a dataset from a path, and chain read ->
// decode+augment -> batch onto a stoke::graph::Pipeline, as every image command of `stoke` does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stoke/gpu/convert.hpp>
#include <stoke/graph/pipeline.hpp>
#include <stoke/nodes/batch.hpp>
#include <stoke/nodes/batch_pool.hpp>
#include <stoke/nodes/dataset.hpp>
#include <stoke/nodes/decode.hpp>
#include <stoke/nodes/transform.hpp>
#include <string>
#include <vector>

namespace stoke::train {

// nodes' types that train's own API takes and gives, under train's names: a program (or a
// binding) written against train needs no other layer's names.
using nodes::DatasetPtr;
using nodes::DecodeColor;
using nodes::ShardRemainder;

/// Loads the plugin library at `path` (nodes/plugin.hpp) into the built-in registries: its
/// transforms and its data formats. Loading a library again is a no-op. Throws
/// std::runtime_error naming the file and what is wrong (missing, not a stoke plugin, built
/// against another stoke, a name already taken).
void load_plugin(const std::filesystem::path& path);

/// Opens `path` as `format`, a data format of nodes::DatasetRegistry::builtin() (the built-in ones
/// and those of loaded plugins): "" or "auto" guesses from the path --
///   a folder with CIFAR batch files                      CIFAR-10/100 (train split)
///   a folder of images/ and masks/ (and no other folder) a SegmentationFolder (pairs by name)
///   a .tar file (or a file with the tar magic)           WebDataset tar shards (nodes::TarShards;
///                                                        .tar.gz and the like are refused by name)
///   a folder of .tar files and no subfolder              all its shards
///   a pattern no file has the name of                    the shards it names, brace ranges and
///     ("shards/train-{000000..000146}.tar", "s/*.tar")   wildcards (nodes::expand_shard_pattern)
///   X.stoke (or a file starting with the pack magic)     a packed shard (stoke pack)
///   a plugin's format that recognises it
///   any other folder                                     an ImageFolder (one subfolder per class;
///                                                        DICOM files too)
///   any other file                                       a FileList, paths relative to its folder
/// -- and "name key=value ..." opens it as that format: "folder", "segmentation", "filelist",
/// "cifar split=test", "packed", "tar", "coco annotations=FILE" (COCO is never guessed).
/// Throws std::runtime_error naming the path when it does not exist or cannot be opened,
/// std::invalid_argument naming the choices for an unknown format or a bad parameter.
nodes::DatasetPtr open_dataset(const std::filesystem::path& path, const std::string& format = "");

/// JPEG through libjpeg-turbo, other formats through OpenCV when this build has stoke::imgcodecs
/// and DICOM through DCMTK when it has stoke::dicom, all decoding to `color` (8-bit RGB, or what
/// the files hold).
nodes::DecodeOptions default_decode_options(nodes::DecodeColor color = nodes::DecodeColor::rgb);

/// What the input pipeline does; the defaults are the ImageNet training recipe at 224.
struct InputConfig {
  std::size_t batch_size = 64;
  int size = 224;  ///< output side: the transforms must end with size x size images
  /// Transform specs for the registry, applied in order. Empty: the default recipe
  /// (random_resized_crop size=<size>, random_horizontal_flip, normalize).
  std::vector<std::string> transforms;
  /// Leave the conversion to float to the compute stage: a trailing normalize transform is taken
  /// off the host's list into Input::convert, and the batches stay uint8 NHWC (4x fewer bytes to
  /// batch and to copy). run_epoch sets it. Off: batches are float NCHW when the last transform
  /// is normalize, uint8 NHWC otherwise.
  bool convert_on_device = false;
  /// With convert_on_device, what the uint8 batches are converted into: the dtype (f32, bf16 or
  /// f16) and layout the model computes in, so that its step gets them without a cast or a
  /// transpose (fit and evaluate set them from the model).
  gpu::DType convert_dtype = gpu::DType::f32;
  gpu::TensorLayout convert_layout = gpu::TensorLayout::nchw;
  bool fuse = true;           ///< let the first transform's crop be done by the JPEG decoder
  /// Float batches on the host: a trailing normalize of 8-bit images is done by the batch stage as
  /// it writes each item into its batch (Input::normalize_in_batch), one pass from the decoded
  /// pixels to the batch's floats; the same bytes as the decode threads normalizing and the batch
  /// stage copying, which is what false does.
  bool normalize_in_batch = true;
  int threads = 0;            ///< parallel stages' concurrency (0: one per core)
  std::size_t in_flight = 0;  ///< items in flight (0: 4 batches' worth, at least 256)
  /// Let stoke::graph's scheduler move the read and decode stages' concurrency within [1, max]
  /// and the in-flight limit while the pipeline runs, starting from the static settings. max:
  /// `threads`, or 2 x the cores when 0; the start: `threads`, or the cores (tuning.cpu_budget
  /// when that is smaller: the scheduler also grows them only within it). Off: every parallel
  /// stage runs at `threads` and the in-flight limit stays `in_flight`, as given.
  bool autotune = true;
  /// The scheduler's settings with autotune (the target stage, budgets, interval, on_decision).
  /// make_input fills item_bytes when 0 (one output sample: size x size x 3 x 4 bytes for float
  /// batches, x 1 for uint8) and max_in_flight when 0 (16 batches' worth, at least `in_flight`).
  graph::AutotuneOptions tuning{};
  /// Overrides of the concurrency (range and start) computed above for one stage, with autotune
  /// on or off; the benchmarks use them to start from a given setting.
  std::optional<graph::Concurrency> read_concurrency{};
  std::optional<graph::Concurrency> decode_concurrency{};
  /// Reads in flight for a dataset whose every read waits on the network (remote shards without a
  /// shard cache: a range request per member), each on a thread of its own (nodes::ReadOnThreads)
  /// so that the stages' cores keep decoding meanwhile; the stage is then an async one, still
  /// named "read".
  int network_reads = 16;
  std::size_t prefetch = 4;  ///< batches queued for the consumer (also the pool's spare slots)
  /// The stages' CPU priority (graph::PipelineOptions::nice: 1..19 lower it, 0 leaves it): for a
  /// consumer that computes on the same cores, whose threads should win them (train::Loader).
  int nice = 0;
  /// Batches that stages the caller puts between the batch stage and its consumer may hold at
  /// once (queued and in hand), added to the pool so that the prefetch depth stays what it says.
  /// Throughput only: whatever the pool's size, the batch stage waits for a slot without a
  /// thread (nodes::Collate is a gated body), so no stage downstream can make it deadlock.
  std::size_t extra_slots = 0;
  std::uint32_t epochs = 1;  ///< 0: repeat until stopped
  /// The number of the first epoch (from 0). Each epoch's order and every item's augmentation are
  /// functions of (seed, epoch, item), so epoch 3 of a run is the same whether the pipeline
  /// started at epoch 0 or at 3 (a resumed run).
  std::uint32_t first_epoch = 0;
  /// Items of the first epoch's order (first_epoch's) to pass over: a run resumed in the middle
  /// of an epoch starts where the interrupted one stopped (stream positions then count from there).
  std::size_t start = 0;
  /// Record the pipeline's spans (PipelineOptions::trace), for the caller to write here with
  /// Pipeline::write_trace (run_epoch in epoch.hpp does). Empty: no trace.
  std::filesystem::path trace_file;
  std::uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;
  /// Data-parallel runs: this process's share of every epoch, rank `rank` of `world`
  /// (nodes::OrderOptions), and what happens to the items left over when `world` does not divide
  /// the dataset's size. `start` then counts this rank's items.
  std::uint32_t rank = 0;
  std::uint32_t world = 1;
  nodes::ShardRemainder remainder = nodes::ShardRemainder::uneven;
  graph::OnError on_error = graph::OnError::skip;
  /// The stall watchdog (graph::StallOptions; limit 0: none). A pass of ComputePath names the
  /// stalled items' files when item_name is empty (item_file()).
  graph::StallOptions stall{};
  nodes::DecodeOptions decode = default_decode_options();
  /// Where batch slots come from: the host allocator, or gpu::batch_allocator(device) (pinned
  /// memory) when the batches go to a CUDA device.
  nodes::AllocatorPtr allocator = nodes::host_allocator();
};

/// The transforms `config` asks for (the default recipe when it lists none), made by the
/// registry, which knows the built-in transforms and those of loaded plugins.
std::vector<nodes::TransformPtr> make_transforms(const InputConfig& config);

/// Everything one run of the input pipeline owns besides the Pipeline itself.
struct Input {
  nodes::DatasetPtr dataset;
  nodes::EpochOrder order;  ///< the visiting order, to name items from stream positions
  nodes::BatchPool pool;
  std::vector<nodes::TransformPtr> transforms;
  graph::PipelineOptions pipeline_options;
  /// With InputConfig::convert_on_device, what the compute stage does to the uint8 batches: the
  /// trailing normalize's mean and stddev, or (without one) mean 0 and stddev 1, a plain 0..1 scale.
  std::optional<gpu::ConvertOptions> convert{};
  /// With InputConfig::normalize_in_batch and float batches from 8-bit images: the trailing
  /// normalize, taken off `transforms`, that the batch stage applies (nodes::CollateOptions).
  std::optional<nodes::PixelNormalization> normalize_in_batch{};
};

/// The shape of the batches `config` makes of `dataset` through `transforms` (make_transforms'
/// list, less a normalize left to the device): 8-bit RGB, float NCHW when the last transform is
/// normalize and uint8 NHWC otherwise, for RGB decoding of plain images (no decode needed); what
/// the first item that reads and decodes gives (nodes::shape_of: its channels, pixel type, mask
/// and targets) with DecodeColor::keep or when the samples carry a mask or targets. Throws
/// std::invalid_argument when the transforms do not end at config.size, std::runtime_error
/// naming the failures when none of the first 16 items reads and decodes.
nodes::BatchShape batch_shape(const nodes::Dataset& dataset, const InputConfig& config,
                              const std::vector<nodes::TransformPtr>& transforms);

/// The visiting order `config` asks of `dataset`: shuffle, seed, rank, world and remainder from
/// the config, the groups (a tar dataset's shards, with the window it was opened with) from the
/// dataset.
nodes::OrderOptions order_options(const nodes::Dataset& dataset, const InputConfig& config);

/// Builds the Input for `dataset` and `config`: batch shape by batch_shape(), pool slots =
/// prefetch + 2, and the pipeline options, with the scheduler's settings (config.tuning
/// completed) when config.autotune.
Input make_input(nodes::DatasetPtr dataset, const InputConfig& config);

/// A file a run left out: the file (the dataset's name for it), the stage's reason (the first
/// time's), and the epochs it was left out in, in order -- a file is listed once however many
/// epochs skip it. The epochs are numbered as the run numbers them: name_skips and a Loader give
/// the input's epochs (from 0, as InputConfig::first_epoch and Loader::set_epoch count); fit()'s
/// results give its own (from 1, as EpochSummary::epoch).
struct SkippedFile {
  std::string file;
  std::string reason;
  std::vector<std::int64_t> epochs{};
};

/// Adds `more` to `into`, one entry per file: a file `into` lists already gains `more`'s epochs
/// (kept in order, each once); a new file is appended while `into` lists fewer than `max_files`.
/// Returns the skips (one per file and epoch) that found no room.
std::uint64_t merge_skipped_files(std::vector<SkippedFile>& into, const std::vector<SkippedFile>& more,
                                  std::size_t max_files);

/// "epoch 3" or "epochs 1, 2, 5" (empty without any): how the CLI and the report say when a file
/// was skipped.
std::string epochs_text(const std::vector<std::int64_t>& epochs);

/// What datasets left out when they opened (nodes::Dataset::ignored(): a file outside a class
/// folder, a tar member that is a link or whose .cls is not a number, a sample without an image, a
/// malformed annotation...), kept apart from the files a run skips (SkippedFile: unreadable or
/// undecodable during a pass): every item counted, the first ones listed.
struct LeftOut {
  std::uint64_t count = 0;                  ///< all of them
  std::vector<nodes::IgnoredFile> files{};  ///< the first ones, in the datasets' order
};

/// How many left-out files the front ends list (`--json`'s left_out_files, the report, a Loader's
/// stats); the count is always complete.
inline constexpr std::size_t max_listed_left_out = 100;

/// `dataset`'s ignored(): all counted, the first `max_files` listed.
LeftOut left_out_of(const nodes::Dataset& dataset, std::size_t max_files = max_listed_left_out);

/// Adds `more` to `into`: the counts summed, `more`'s files appended while `into` lists fewer than
/// `max_files` (a run's training and validation sets in one list).
void merge_left_out(LeftOut& into, const LeftOut& more, std::size_t max_files = max_listed_left_out);

/// One line on what a dataset read over the network (remote shards), for the CLI's text:
/// "network: 12.3 MB in 40 requests (0 retries), 0.8 s waiting; cache: 7 hits, 2 misses, ...".
std::string network_text(const nodes::NetworkStats& network);

/// "network" when `stage` is the read stage ("read") and the dataset's reads waited on the network
/// for most of that stage's busy time; else `stage`. How the bottleneck line can say "network".
std::string network_or(std::string stage, const std::vector<graph::StageStats>& stages,
                       const std::optional<nodes::NetworkStats>& network);

/// The dataset's name (a file) for the item at stream position `index` of a run of `input` made
/// with `config` (its first epoch and start position). After the batch stage, a batch's index is
/// that of its last item.
std::string item_file(const Input& input, const InputConfig& config, std::uint64_t index);

/// The files behind report.skipped_items (which the graph names by stream position) of a run of
/// `input` made with `config` (its start position), each once with the input epochs it was skipped
/// in, in the order they were first skipped.
std::vector<SkippedFile> name_skips(const graph::RunReport& report, const Input& input, const InputConfig& config);

/// Chains source -> read -> decode (+augment) -> batch onto `pipe` (built with
/// input.pipeline_options) and returns the flow of batches, for the caller's sink.
graph::Flow<nodes::Batch> add_input(graph::Pipeline& pipe, const Input& input, const InputConfig& config);

}  // namespace stoke::train
