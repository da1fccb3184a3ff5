// DatasetRegistry: the data formats a path can be opened as ("folder", "tar", "coco", ...), each
// declaring once how to recognise a path, how to open it and what parameters it takes -- as
// Registry does for transforms. train::open_dataset, the apps' --format (its choices and help) and
// stoke.Loader(format=...) all come from it, and plugins add formats (plugin.hpp).
//
//   const auto& formats = stoke::nodes::DatasetRegistry::builtin();
//   DatasetPtr photos = formats.open("photos/train");                        // recognised: a folder
//   DatasetPtr coco = formats.open("val2017", "coco annotations=instances_val2017.json");
//
// A format is written as a spec, "name key=value ..." (registry.hpp's syntax and errors), or
// "auto" (or ""): the first entry, in guessing order, that recognises the path.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoke/nodes/dataset.hpp"
#include "stoke/nodes/registry.hpp"

namespace stoke::nodes {

/// What a format's path must be when the format is named (the checks before open is called).
enum class DataPath : std::uint8_t { folder, file, any };

/// One data format: its name, a one-line doc, its parameters, and how to recognise and open a path.
struct DatasetEntry {
  std::string name;
  std::string doc;
  std::vector<ParamDoc> params;
  /// Opens `path` with the spec's parameters (read every declared one). Throws std::runtime_error
  /// naming the path when it cannot, std::invalid_argument for a parameter out of range.
  std::function<DatasetPtr(const std::filesystem::path& path, const Params& params)> open;
  /// What `path` must be when the format is named: a folder, a file, or either.
  DataPath takes = DataPath::any;
  /// Whether `path` is of this format, for "auto"; `status` is the path's (file_type::not_found for
  /// a path that does not exist, which a format of patterns may still take). Empty: the format is
  /// opened by name only (its parameters are required, or the guess would be unsafe). It may throw
  /// std::runtime_error to stop the guessing with a better message (a pack's .idx file).
  std::function<bool(const std::filesystem::path& path, std::filesystem::file_status status)> recognise{};
  /// Where the guess asks this entry, lower first (ties: by name). The built-ins: the specific ones
  /// 10-40, the catch-alls 1000 (any folder is an image folder, any file a file list); a plugin's
  /// formats come between, at 100, unless they say otherwise.
  int guess_order = 100;
};

/// Data formats by name. Errors (std::invalid_argument), each naming what exists:
///   unknown name       -> "unknown data format 'zip'; known: cifar, coco, ... (did you mean ...?)"
///   bad parameters     -> as Registry::make ("coco: missing required parameter 'annotations' ...")
///   duplicate add()    -> "data format 'tar' is already registered; registered: ..."
/// A path that is missing, or a folder where the format takes a file (or the reverse), is a
/// std::runtime_error naming the path and what would do.
///
/// Thread-safety: as Registry (add under a writer lock, the rest under a reader lock); entries are
/// never removed, so a pointer from find() stays valid for the registry's life.
class DatasetRegistry {
 public:
  DatasetRegistry() = default;
  DatasetRegistry(const DatasetRegistry&) = delete;
  DatasetRegistry& operator=(const DatasetRegistry&) = delete;

  /// Registers `entry`. Throws std::invalid_argument as Registry::add does (name, factory,
  /// parameters), and when the name is "auto" or taken.
  void add(DatasetEntry entry);

  /// Opens `path` as `format`: "" or "auto" guesses, "name k=v ..." opens as that entry.
  DatasetPtr open(const std::filesystem::path& path, std::string_view format = "auto") const;
  /// Throws what open would for `format` itself (unknown name, bad or missing parameters, values
  /// that do not parse), without a path: the apps check --format before they start.
  void check(std::string_view format) const;

  /// The entry called `name`, or nullptr.
  const DatasetEntry* find(std::string_view name) const;
  /// Every registered name, sorted.
  std::vector<std::string> names() const;
  /// "auto, cifar, coco, folder, ...": the values --format takes.
  std::string choices() const;
  /// Every entry, sorted by name: name and doc, then a line per parameter.
  std::string help() const;

  /// The process-wide registry with the built-in formats (register_builtin_datasets) already
  /// added; created on first use (thread-safe). Plugins loaded by the apps add to it.
  static DatasetRegistry& builtin();

 private:
  DatasetPtr guess(const std::filesystem::path& path, std::filesystem::file_status status) const;
  /// The entry `spec` names and its values, checked against the entry's parameters.
  std::pair<const DatasetEntry*, Params> bind(std::string_view spec) const;

  mutable std::shared_mutex mutex_;
  std::map<std::string, DatasetEntry, std::less<>> entries_;
};

/// Adds the built-in formats to `registry`: folder, segmentation, filelist, cifar, packed, tar and
/// coco. Defined in builtin_datasets.cpp.
void register_builtin_datasets(DatasetRegistry& registry);

}  // namespace stoke::nodes
