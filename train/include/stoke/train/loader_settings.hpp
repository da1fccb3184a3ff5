// LoaderSettings: a Loader's settings as a binding takes them -- stoke.Loader's keyword arguments
// -- declared once, in for_each_setting: each setting's name, member and meaning, in order. From
// that one list come reading the settings from JSON (what both Python bindings receive),
// describing them (the list stoke.Loader builds its signature and its docstring from) and, through
// input_config, the InputConfig the Loader runs.
//
//   const LoaderSettings s = loader_settings_from_json(R"({"data": "photos/train", "batch_size": 128})");
//   Loader loader = make_loader(s);
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stoke/train/input.hpp"
#include "stoke/train/loader.hpp"

namespace stoke::train {

/// The defaults are stoke.Loader's. An optional setting left empty (Python's None) means what its
/// text in for_each_setting says.
struct LoaderSettings {
  std::string data;
  std::vector<std::string> transforms;
  std::size_t batch_size = 64;
  int size = 224;
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;
  std::uint32_t rank = 0;
  std::uint32_t world = 1;
  std::string remainder = "pad";
  std::optional<int> threads;
  bool autotune = true;
  std::optional<int> cpu_budget;
  std::string on_error = "skip";
  std::vector<std::string> plugins;
  std::size_t prefetch = 4;
  std::string format = "auto";
  std::string color = "rgb";
  bool fuse = true;
  int nice = 10;
  std::optional<std::uint32_t> epochs;
  std::optional<bool> normalize_on_device;
};

/// Calls visit(name, member, doc) for every setting of `s`, in stoke.Loader's order: the one
/// declaration of what a Loader takes from a binding.
template <class Settings, class Visit>
void for_each_setting(Settings& s, Visit&& visit) {
  visit("data", s.data,
        "what ``stoke train --data`` takes: an ImageFolder (one folder per class), a file list "
        "(.csv/.txt), a CIFAR folder, a pack (.stoke), tar shards (a file, a folder, a pattern), a "
        "segmentation folder, or with ``format`` a folder of COCO images.");
  visit("transforms", s.transforms,
        "registry specs, as ``stoke bench pipeline --transform`` takes them, applied in order; they "
        "must end at ``size`` x ``size``. Default: ``random_resized_crop size=<size>``, "
        "``random_horizontal_flip``, ``normalize``. With a final ``normalize`` the images are float32 "
        "NCHW, normalized; without, uint8 NHWC (``stoke bench pipeline --list-transforms`` lists the "
        "transforms and their parameters).");
  visit("batch_size", s.batch_size, "items per batch, as DataLoader's.");
  visit("size", s.size, "the side of the square images the transforms end with.");
  visit("shuffle", s.shuffle, "a new order every epoch, as DataLoader's.");
  visit("seed", s.seed,
        "each epoch's order and each item's augmentation are functions of (seed, epoch, item): "
        "set_epoch() picks the epoch.");
  visit("drop_last", s.drop_last, "leave out a last batch that would be short, as DataLoader's.");
  visit("rank", s.rank, "this process's share of each epoch in a data-parallel run: rank ``rank`` of ``world``.");
  visit("world", s.world, "the processes of a data-parallel run.");
  visit("remainder", s.remainder,
        "what makes the ranks' shares equal: \"pad\" (repeat items, as DistributedSampler), \"drop\" "
        "or \"uneven\".");
  visit("threads", s.threads,
        "the parallel stages' threads (None: one per core to start; with autotune the scheduler "
        "moves them within [1, 2 x cores]).");
  visit("autotune", s.autotune, "let stoke's scheduler move threads and the in-flight limit while it runs.");
  visit("cpu_budget", s.cpu_budget,
        "the cores the loader's stages may keep busy together (None: every core this process may "
        "run on). The parallel stages start at that many threads (at most one per core) and the "
        "scheduler grows a stage only while the stages' measured busy time stays within it. Lower "
        "it (and torch.set_num_threads) only to keep cores for something else.");
  visit("on_error", s.on_error,
        "\"skip\" (an unreadable or undecodable file is left out, counted and named in "
        "stats()[\"skipped_files\"]) or \"fail\" (the iteration raises, naming the stage and the file).");
  visit("plugins", s.plugins,
        "shared libraries of stoke plugins to load first (their transforms can then be named in "
        "``transforms``, their data formats in ``format``).");
  visit("prefetch", s.prefetch, "batches prepared ahead (the pool holds prefetch + 2 batches).");
  visit("format", s.format,
        "\"auto\" (recognise ``data``) or a data format with its parameters, as ``stoke train "
        "--format`` takes it: \"folder\", \"tar\", \"cifar split=test\", \"coco "
        "annotations=instances_val2017.json\" (a COCO set's batches carry \"boxes\", \"box_classes\", "
        "\"box_counts\" and \"box_extras\" (iscrowd)); ``stoke bench pipeline --list-formats`` lists "
        "them. A plugin may add formats.");
  visit("color", s.color, "\"rgb\" (8-bit RGB) or \"keep\" (what the files hold: grayscale, 16-bit, more channels).");
  visit("fuse", s.fuse, "let the first transform's crop be done by the JPEG decoder.");
  visit("nice", s.nice,
        "the loader threads' CPU priority while they work, a Linux nice value (0: the caller's, up "
        "to 19). The rule for sharing the cores with a model training on the same CPU: leave torch "
        "its threads (one per core), the loader its default budget and a lower priority, and let "
        "torch's OpenMP threads sleep when idle (``OMP_WAIT_POLICY=PASSIVE`` in the environment "
        "before torch is imported; by default they spin and hold the cores). torch's threads then "
        "win a core whenever they can run; the loader's threads take the time they leave, and when "
        "the loop waits for a batch it sleeps and they have the cores (docs/benchmarks.md has the "
        "figures). Threads of oneTBB that served the loader get their priority back afterwards "
        "only where the process may raise it (root, CAP_SYS_NICE); elsewhere they keep the lower one.");
  visit("epochs", s.epochs,
        "the epochs the run reads (0 .. epochs - 1), when known. The loader then stops at the last "
        "one's end; without it (None) it goes on preparing the next epoch's first batches while the "
        "loop finishes an epoch -- at the run's end, decoding no one takes (up to the pool's "
        "batches and the in-flight items), on the cores the training loop is using. Iterating an "
        "epoch past the last raises ValueError.");
  visit("normalize_on_device", s.normalize_on_device,
        "when the transforms end with ``normalize``, leave it to the tensors' device: the batches are "
        "made and copied as uint8 NHWC (a quarter of the bytes of float32) and the loader applies "
        "the normalize to them where they are, giving the same float32 NCHW tensors (to float "
        "rounding). None: on for a CUDA device, off on the CPU (where the pipeline's own normalize is "
        "cheaper than torch's).");
}

/// The settings in a JSON object whose keys are the settings' names (null: an optional setting
/// left empty); a key left out keeps its default. Throws std::invalid_argument naming a key it
/// does not know or a value of the wrong type.
LoaderSettings loader_settings_from_json(std::string_view json);

/// The declaration as data, for a binding to build its signature and docs from: an array, in
/// order, of {"name", "type" ("str", "int", "bool", "list[str]"; "int?" or "bool?" for an optional one),
/// "default" (null for an empty optional), "doc"}.
nlohmann::json describe_loader_settings();

/// The InputConfig of `s`. Throws std::invalid_argument naming the setting for a word it does not
/// know (remainder, on_error, color, with the choices), a rank not below world, a zero batch size,
/// a nice value outside 0..19, a cpu_budget or epochs below 1.
InputConfig input_config(const LoaderSettings& s);

/// The dataset of `s`: its plugins loaded (load_plugin), then `data` opened as `format`
/// (open_dataset). Throws what those throw.
DatasetPtr open_dataset(const LoaderSettings& s);

/// A Loader over open_dataset(s) with input_config(s) (checked first, before any file is opened)
/// and `s`'s epochs. With normalize_on_device, the loader leaves a trailing normalization to the
/// caller (InputConfig::convert_on_device; Loader::convert() says what it is) when the transforms
/// end with one, and changes nothing when they do not.
Loader make_loader(const LoaderSettings& s);

/// What the caller of a loader made with normalize_on_device applies to its uint8 NHWC images
/// (Loader::convert()) as JSON: {"mean": [...], "stddev": [...], "range": r} (range 0: the pixel
/// type's full scale), or null when the batches come as the transforms leave them.
nlohmann::json loader_normalization(const Loader& loader);

}  // namespace stoke::train
