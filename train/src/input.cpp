#include "stoke/train/input.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <stoke/base/byte_size.hpp>
#include <stoke/nodes/collate.hpp>
#include <stoke/nodes/dataset_registry.hpp>
#include <stoke/nodes/decode_augment.hpp>
#include <stoke/nodes/plugin.hpp>
#include <stoke/nodes/read_on_threads.hpp>
#include <stoke/nodes/registry.hpp>
#if __has_include(<stoke/nodes/opencv_codec.hpp>)
#include <stoke/nodes/opencv_codec.hpp>
#define STOKE_TRAIN_HAS_IMGCODECS 1
#endif
#if __has_include(<stoke/nodes/dicom_codec.hpp>)
#include <stoke/nodes/dicom_codec.hpp>
#define STOKE_TRAIN_HAS_DICOM 1
#endif
#include <thread>

namespace stoke::train {

namespace fs = std::filesystem;

void load_plugin(const fs::path& path) { nodes::load_plugin(path, nodes::Registry::builtin()); }

nodes::DatasetPtr open_dataset(const fs::path& path, const std::string& format) {
  return nodes::DatasetRegistry::builtin().open(path, format);
}

nodes::DecodeOptions default_decode_options(nodes::DecodeColor color) {
  nodes::DecodeOptions options;
  options.color = color;
#ifdef STOKE_TRAIN_HAS_IMGCODECS
  options.other_formats = nodes::opencv_codec(color);
#endif
#ifdef STOKE_TRAIN_HAS_DICOM
  options.other_formats = nodes::dicom_codec(std::move(options.other_formats));
#endif
  return options;
}

std::vector<nodes::TransformPtr> make_transforms(const InputConfig& config) {
  std::vector<std::string> specs = config.transforms;
  if (specs.empty()) {
    specs = {"random_resized_crop size=" + std::to_string(config.size), "random_horizontal_flip", "normalize"};
  }
  return nodes::Registry::builtin().make_list(std::span<const std::string>(specs));
}

nodes::BatchShape batch_shape(const nodes::Dataset& dataset, const InputConfig& config,
                              const std::vector<nodes::TransformPtr>& transforms) {
  const bool normalized = !transforms.empty() && transforms.back()->normalization().has_value();
  nodes::BatchShape rgb{.batch_size = config.batch_size,
                        .height = config.size,
                        .width = config.size,
                        .channels = 3,
                        .layout = normalized ? nodes::BatchLayout::nchw : nodes::BatchLayout::nhwc,
                        .pixel_type = normalized ? nodes::ElementType::f32 : nodes::ElementType::u8};
  // Read the first items until one reads: its fields say whether the batches carry masks, targets
  // or boxes; with DecodeColor::rgb and none of them, the shape is the one above without decoding.
  constexpr std::size_t tries = 16;
  std::string failures;
  for (std::size_t i = 0; i < std::min(dataset.size(), tries); ++i) {
    try {
      nodes::Sample sample = dataset.read(i);
      sample.index = i;
      const bool boxes = !sample.boxes.empty() || sample.boxes.extras > 0;
      if (config.decode.color == nodes::DecodeColor::rgb && sample.mask.empty() && sample.targets.empty() && !boxes) {
        return rgb;
      }
      nodes::DecodeAugment decode(nodes::Decoder(config.decode), nodes::Augment(transforms, config.seed), config.fuse);
      const nodes::Image image = decode(std::move(sample));
      if (image.width() != config.size || image.height() != config.size) {
        throw std::invalid_argument("the transforms make " + std::to_string(image.width()) + "x" +
                                    std::to_string(image.height()) + " images, not " + std::to_string(config.size) +
                                    "x" + std::to_string(config.size) + ": end them with a crop or resize to the size");
      }
      return nodes::shape_of(image, config.batch_size);
    } catch (const std::invalid_argument&) {
      throw;  // the recipe, not the item
    } catch (const std::exception& error) {
      failures += std::string("\n  ") + error.what();
    }
  }
  if (dataset.size() == 0) return rgb;  // nothing to batch: any shape will do
  throw std::runtime_error("the batch shape comes from the data, but none of its first " +
                           std::to_string(std::min(dataset.size(), tries)) +
                           " items could be read and decoded:" + failures);
}

nodes::OrderOptions order_options(const nodes::Dataset& dataset, const InputConfig& config) {
  return {.shuffle = config.shuffle,
          .seed = config.seed,
          .rank = config.rank,
          .world = config.world,
          .remainder = config.remainder,
          .groups = dataset.groups()};
}

Input make_input(nodes::DatasetPtr dataset, const InputConfig& config) {
  if (!dataset) throw std::invalid_argument("make_input: no dataset");
  if (config.batch_size == 0 || config.size <= 0)
    throw std::invalid_argument("batch size and image size must be positive");

  auto transforms = make_transforms(config);
  std::optional<gpu::ConvertOptions> convert;
  if (config.convert_on_device) {
    convert = gpu::ConvertOptions{.mean = {0.0f},  // 0..1, every channel
                                  .stddev = {1.0f},
                                  .range = 0,
                                  .dtype = config.convert_dtype,
                                  .layout = config.convert_layout};
    if (auto normalize = transforms.empty() ? std::nullopt : transforms.back()->normalization()) {
      convert->mean = std::move(normalize->mean);
      convert->stddev = std::move(normalize->stddev);
      convert->range = normalize->range;
      transforms.pop_back();
    }
  }
  std::optional<nodes::PixelNormalization> normalize_in_batch;
  nodes::BatchShape shape = batch_shape(*dataset, config, transforms);
  if (!convert && config.normalize_in_batch && shape.pixel_type == nodes::ElementType::f32 && !transforms.empty()) {
    if (auto normalize = transforms.back()->normalization()) {
      // The batch stage normalizes 8-bit items as it writes them into the batch: one pass.
      std::vector<nodes::TransformPtr> before(transforms.begin(), std::prev(transforms.end()));
      const nodes::BatchShape arriving = batch_shape(*dataset, config, before);
      if (arriving.pixel_type == nodes::ElementType::u8 && arriving.layout == nodes::BatchLayout::nhwc &&
          !arriving.variable_size && shape.layout == nodes::BatchLayout::nchw && !shape.variable_size) {
        transforms = std::move(before);
        normalize_in_batch = std::move(normalize);
      }
    }
  }

  graph::PipelineOptions options;
  options.threads = config.threads;
  options.trace = !config.trace_file.empty();
  options.stall = config.stall;
  options.nice = config.nice;
  options.max_in_flight = config.in_flight > 0 ? config.in_flight : std::max<std::size_t>(2 * config.batch_size, 64);
  if (config.autotune) {
    graph::AutotuneOptions tuning = config.tuning;
    // The in-flight items are mostly decoded samples waiting for their batch: that is what the
    // memory budget divides. The batches themselves live in the pool, allocated up front.
    if (tuning.item_bytes == 0) tuning.item_bytes = shape.item_bytes();
    if (tuning.max_in_flight == 0) tuning.max_in_flight = std::max(16 * config.batch_size, options.max_in_flight);
    options.autotune = std::move(tuning);
  }

  nodes::EpochOrder order(dataset->size(), order_options(*dataset, config));
  // Slots: the consumer's queue (prefetch), one the batch stage may put beyond it and one in the
  // consumer's hands (Collate takes a slot only once a batch is complete), plus what the caller's
  // stages in between hold. With that many the batch stage seldom waits for a slot (the graph's
  // backpressure stops it first); when it does, it parks without a thread.
  nodes::BatchPool pool(shape, config.prefetch + 2 + config.extra_slots, config.allocator);
  Input input{std::move(dataset), order, std::move(pool), std::move(transforms), options, convert};
  input.normalize_in_batch = std::move(normalize_in_batch);
  return input;
}

namespace {

// The read and decode stages' concurrency when the config does not override it.
graph::Concurrency default_concurrency(const InputConfig& config) {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (!config.autotune) return graph::parallel(config.threads > 0 ? config.threads : cores);
  // Reading may wait on the disk and decoding on memory: a little more than a thread per core
  // can pay, which only the measurements can tell; the scheduler starts at one per core, or at the
  // CPU budget when that is smaller (the cores left to the stages when a model trains beside them).
  if (config.threads > 0) return graph::parallel(1, config.threads, config.threads);
  const int budget = config.tuning.cpu_budget;
  return graph::parallel(1, 2 * cores, budget > 0 ? std::min(cores, budget) : cores);
}

}  // namespace

namespace {

// Remote shards read with a range request per member: every read waits on the network. (With a
// shard cache, or shards streamed into memory, reads are mostly local: the cores read them.)
bool reads_wait_on_network(const nodes::Dataset& dataset) {
  const std::optional<nodes::NetworkStats> network = dataset.network();
  // Whole shards streamed into memory ahead of the reads: with a window most reads find theirs.
  const bool streamed = network && network->stream_budget > 0 && dataset.groups().window > 0;
  return network && !network->cached && !streamed;
}

}  // namespace

graph::Flow<nodes::Batch> add_input(graph::Pipeline& pipe, const Input& input, const InputConfig& config) {
  const graph::Concurrency parallel = default_concurrency(config);
  nodes::DecodeAugment decode(nodes::Decoder(config.decode), nodes::Augment(input.transforms, config.seed),
                              config.fuse);
  auto batch_options = nodes::Collate::stage_options();
  batch_options.on_error = graph::OnError::fail;  // a wrong-size image is a recipe mistake, not bad data
  // The source tells the dataset each epoch's order, for a dataset that fetches ahead.
  nodes::DatasetSource source(input.dataset, input.order.options(), config.epochs, config.first_epoch);
  source.skip(config.start);
  graph::Flow<nodes::ItemRef> sourced = pipe.source("source", std::move(source));
  graph::Flow<nodes::Sample> read =
      reads_wait_on_network(*input.dataset)
          ? std::move(sourced).async<nodes::Sample>(
                "read", nodes::ReadOnThreads(input.dataset, config.network_reads),
                {.concurrency = graph::parallel(std::max(1, config.network_reads)), .on_error = config.on_error})
          : std::move(sourced).map(
                "read", nodes::ReadSample(input.dataset),
                {.concurrency = config.read_concurrency.value_or(parallel), .on_error = config.on_error});
  return std::move(read)
      .map("decode", std::move(decode),
           {.concurrency = config.decode_concurrency.value_or(parallel), .on_error = config.on_error})
      .emit<nodes::Batch>(
          "batch", nodes::Collate(input.pool, {.drop_last = config.drop_last, .normalize = input.normalize_in_batch}),
          batch_options);
}

// The skip report names items by stream position; the reason usually starts with the file.
// Skips come in source order, so each epoch's permutation is computed once.
std::string item_file(const Input& input, const InputConfig& config, std::uint64_t index) {
  const std::size_t per_epoch = input.order.per_epoch();
  if (per_epoch == 0) return {};
  const std::uint64_t position = index + config.start;
  const std::vector<std::uint64_t> order =
      input.order.indices(static_cast<std::uint32_t>(config.first_epoch + position / per_epoch));
  return input.dataset->name(static_cast<std::size_t>(order[position % per_epoch]));
}

std::vector<SkippedFile> name_skips(const graph::RunReport& report, const Input& input, const InputConfig& config) {
  std::vector<SkippedFile> named;
  const std::size_t per_epoch = input.order.per_epoch();
  std::optional<std::uint64_t> epoch;
  std::vector<std::uint64_t> order;
  for (const auto& item : report.skipped_items) {
    const std::uint64_t position = item.index + config.start;
    if (config.first_epoch + position / per_epoch != epoch) {
      epoch = config.first_epoch + position / per_epoch;
      order = input.order.indices(static_cast<std::uint32_t>(*epoch));
    }
    std::string file = input.dataset->name(static_cast<std::size_t>(order[position % per_epoch]));
    std::string reason = item.reason;
    if (reason.rfind(file + ": ", 0) == 0) reason.erase(0, file.size() + 2);
    named.push_back({std::move(file), item.stage + ": " + reason, {static_cast<std::int64_t>(*epoch)}});
  }
  std::vector<SkippedFile> out;
  merge_skipped_files(out, named, named.size());
  return out;
}

std::uint64_t merge_skipped_files(std::vector<SkippedFile>& into, const std::vector<SkippedFile>& more,
                                  std::size_t max_files) {
  std::uint64_t unlisted = 0;
  for (const SkippedFile& f : more) {
    auto it = std::find_if(into.begin(), into.end(), [&](const SkippedFile& x) { return x.file == f.file; });
    if (it == into.end()) {
      if (into.size() >= max_files) {
        unlisted += std::max<std::size_t>(1, f.epochs.size());
        continue;
      }
      it = into.insert(into.end(), SkippedFile{f.file, f.reason, {}});
    }
    for (const std::int64_t e : f.epochs) {
      auto at = std::lower_bound(it->epochs.begin(), it->epochs.end(), e);
      if (at == it->epochs.end() || *at != e) it->epochs.insert(at, e);
    }
  }
  return unlisted;
}

LeftOut left_out_of(const nodes::Dataset& dataset, std::size_t max_files) {
  const std::vector<nodes::IgnoredFile>& ignored = dataset.ignored();
  LeftOut out{.count = ignored.size()};
  out.files.assign(ignored.begin(), ignored.begin() + static_cast<std::ptrdiff_t>(std::min(ignored.size(), max_files)));
  return out;
}

void merge_left_out(LeftOut& into, const LeftOut& more, std::size_t max_files) {
  into.count += more.count;
  for (const nodes::IgnoredFile& file : more.files) {
    if (into.files.size() >= max_files) break;
    into.files.push_back(file);
  }
}

std::string network_text(const nodes::NetworkStats& n) {
  char head[160];
  std::snprintf(head, sizeof head, "network: %s in %llu requests (%llu retries), %.1f s waiting",
                base::byte_size_text(n.bytes).c_str(), static_cast<unsigned long long>(n.requests),
                static_cast<unsigned long long>(n.retries), n.wait_seconds);
  std::string text = head;
  if (n.cached) {
    char cache[200];
    std::snprintf(cache, sizeof cache,
                  "; cache: %llu hits, %llu misses, %llu prefetched, %llu evictions, %s of %s (peak %s)",
                  static_cast<unsigned long long>(n.cache_hits), static_cast<unsigned long long>(n.cache_misses),
                  static_cast<unsigned long long>(n.cache_prefetched),
                  static_cast<unsigned long long>(n.cache_evictions), base::byte_size_text(n.cache_bytes).c_str(),
                  base::byte_size_text(n.cache_budget).c_str(), base::byte_size_text(n.cache_peak_bytes).c_str());
    text += cache;
  }
  if (n.stream_budget > 0) {
    text += "; streamed into memory: " + std::to_string(n.stream_shards) + " shards (peak " +
            base::byte_size_text(n.stream_peak_bytes) + " of " + base::byte_size_text(n.stream_budget) + ")";
  }
  return text;
}

std::string network_or(std::string stage, const std::vector<graph::StageStats>& stages,
                       const std::optional<nodes::NetworkStats>& network) {
  if (stage != "read" || !network) return stage;
  for (const graph::StageStats& s : stages) {
    if (s.name == stage && network->wait_seconds > 0.5 * std::chrono::duration<double>(s.busy).count()) {
      return "network";
    }
  }
  return stage;
}

std::string epochs_text(const std::vector<std::int64_t>& epochs) {
  if (epochs.empty()) return {};
  std::string text = epochs.size() == 1 ? "epoch " : "epochs ";
  for (std::size_t i = 0; i < epochs.size(); ++i) text += (i > 0 ? ", " : "") + std::to_string(epochs[i]);
  return text;
}

}  // namespace stoke::train
